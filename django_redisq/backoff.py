"""Retry delays: a pure function, so the policy is testable without Redis."""

from __future__ import annotations

import random


def compute_backoff(
    failures: int,
    base: float = 1.0,
    cap: float = 300.0,
    jitter: float = 0.25,
    rand: random.Random | None = None,
) -> int:
    """Delay in ms before the next attempt, after ``failures`` failed attempts (>= 1).

    Exponential (``base * 2**(failures-1)``) up to ``cap`` seconds, then reduced
    by a random share of at most ``jitter``, so tasks that failed together do
    not retry together.
    """
    if failures < 1:
        raise ValueError("failures must be at least 1")
    delay = min(cap, base * (2 ** min(failures - 1, 62)))
    r = (rand or random).random()
    return max(0, int(delay * (1 - jitter * r) * 1000))
