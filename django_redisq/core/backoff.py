"""Retry delays: pure functions, so the policy is testable without Redis.

``compute_backoff`` is ours (``BACKOFF_BASE``, ``BACKOFF_MAX``, jitter);
``call_backoff`` runs a task's own ``backoff`` function, the way Django's
retry proposal (new-features #142) spells it, and checks what it returns.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

from django_redisq.compat import InvalidTask
from django_redisq.exceptions import InvalidBackoff


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


MAX_DELAY = 366 * 86400
"""Seconds, at most, a ``backoff`` callable may ask for (a year and a day): anything longer is a mistake."""


def check_backoff(fn: Any) -> Callable[..., Any]:
    """``fn`` if it can be a task's ``backoff``: a plain callable; ``InvalidTask`` saying why not otherwise."""
    if not callable(fn) or isinstance(fn, (str, bytes)):
        raise InvalidTask(f"backoff must be a function (exception, task_result) -> seconds or None, got {fn!r}.")
    if inspect.iscoroutinefunction(fn) or (not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)):
        raise InvalidTask(f"backoff must be a plain function, not a coroutine function: {fn!r}.")
    return cast("Callable[..., Any]", fn)


def call_backoff(fn: Callable[..., Any], exc: BaseException, task_result: Any) -> int | None:
    """The delay in ms ``fn(exc, task_result)`` asks for before the next attempt; None: no more attempts.

    Django's retry proposal (new-features #142): the function gets the exception
    the attempt raised and the ``TaskResult`` as this attempt left it (its error
    appended, FAILED), and returns seconds (an int or float >= 0, or a
    ``timedelta``) or None to stop retrying. Anything else, or an exception from
    it, raises ``InvalidBackoff`` chained to ``exc``.
    """
    name = getattr(fn, "__qualname__", None) or repr(fn)
    try:
        value = fn(exc, task_result)
    except Exception as problem:  # noqa: BLE001 - the task's own code: its failure is a dead letter, never a worker crash
        raise InvalidBackoff(f"backoff {name} raised {type(problem).__name__}: {problem}") from exc
    if value is None:
        return None
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_DELAY:
        raise InvalidBackoff(
            f"backoff {name} returned {value!r} after attempt {getattr(task_result, 'attempts', '?')}: "
            f"it must return seconds from 0 to {MAX_DELAY} (an int, a float or a timedelta), or None to stop retrying"
        ) from exc
    return int(value * 1000)
