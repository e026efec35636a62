"""What a workflow's shape must fit at creation: a step's message holds its parents' results.

A step that takes its parents' results (a chord's callback, the step after a
group) is queued with all of them joined into its first argument (wf_done.lua,
store/workflows/store.py ``enqueue_step``), so its message grows with its fan-in.

The rule, and why: the true worst case is ``parents x RESULT_MAX_BYTES`` of
their queues, and with the defaults (RESULT_MAX_BYTES 1 MiB, MAX_MESSAGE_BYTES
512 KiB) even a chain of two steps could reach it, so refusing on it would
refuse every ordinary chain and chord. Creation refuses only a shape that
cannot fit even when every parent returns the smallest JSON value (``0``: two
bytes each with its comma): such a step can never be queued whatever the
parents return. Everything else is left to the run-time check, which fails the
workflow whose released step is over MAX_MESSAGE_BYTES. The refusal names the
numbers of both cases and what to change.
"""

from __future__ import annotations

from typing import Any

from django_redisq.core.message import dumps
from django_redisq.workflows.canvas import InvalidWorkflow, Step

SMALLEST_RESULT = 2
"""Bytes one parent's result adds to its dependent's message at the least: ``0`` and a comma."""


def fan_in(spec: dict[str, Any]) -> int:
    """How many parents' results a step's message carries: all for ``list``, the first for ``one``, none otherwise."""
    mode = spec.get("mode", "none")
    return len(spec.get("p") or []) if mode == "list" else (1 if mode == "one" and spec.get("p") else 0)


def check_fan_in(backend: Any, steps: list[Step], specs: dict[int, dict[str, Any]]) -> None:
    """``InvalidWorkflow`` for a step whose message cannot fit MAX_MESSAGE_BYTES even with its parents' smallest results."""
    limit = int(backend.conf.max_message_bytes)
    for s in steps:
        spec = specs[s.index]
        n = fan_in(spec)
        if not n:
            continue
        own = len(dumps([spec.get("a") or [], spec.get("k") or {}, spec.get("m") or {}]).encode("utf-8"))
        least = own + n * SMALLEST_RESULT
        if least <= limit:
            continue
        worst = own + sum(backend.conf.for_queue(specs[p]["q"]).result_max_bytes for p in spec["p"][:n])
        raise InvalidWorkflow(
            f"step {s.index} ({spec['t']}) takes the results of {n} steps: even if each returns 0 its message is "
            f"{least:,} bytes ({own:,} of its own arguments), over MAX_MESSAGE_BYTES ({limit:,}); at their queues' "
            f"RESULT_MAX_BYTES it could be {worst:,}. Use fewer members per chord (e.g. chords of chords), "
            f"or raise MAX_MESSAGE_BYTES (and keep RESULT_MAX_BYTES of those queues small).")
