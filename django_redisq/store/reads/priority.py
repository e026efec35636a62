"""Priorities: Django's ``priority`` (-100..100, higher first), as store/scripts/lib/ready.lua stores it.

A task of the default priority (0) waits in the queue's pending LIST, exactly as
before priorities existed, so a queue that never uses them pays nothing. Any other
priority waits in the ``prioritized`` ZSET, scored ``(100 - priority) * BAND + n``
(``n`` a per-queue counter: FIFO within one priority). fetch.lua takes the ZSET's
priorities above 0, then the LIST, then those below 0. Workers block on the LIST
alone, so a prioritized task that arrives while the LIST is empty pushes a
``MARKER`` there to wake one. Markers sit at the LIST's tail (the end taken next),
at most ``MARKERS_MAX``; ids a script pushes drop them, but a plain enqueue's
``LPUSH`` (store/broker/plain.py) may put an id at the head while they wait, so
a LIST is read with its tail (``TAIL``), never its length alone.

This module is the Python side of that layout: reading a stored priority, and
the ready tasks of a queue in the order they will run (for the admin and counts).
"""

from __future__ import annotations

from typing import Any

import redis

from django_redisq.store.keys import QueueKeys

MARKER = "~redisq:wake"
"""A wake-up in the pending LIST, not a task id: a reserved id (ours are URL-safe base64; no producer may use this one)."""
MARKERS_MAX = 64
"""At most this many markers wait in a LIST (lib/ready.lua): wake-ups for as many blocked workers at once, never more,
so a steady stream of prioritized tasks taken straight from the set does not pile markers up."""
BAND = 2**44
DEFAULT_SCORE = 100 * BAND
"""Scores below this are priorities above 0 (they run before the LIST); above it, below 0."""
MIN, MAX = -100, 100


def stored_priority(value: Any) -> int:
    """A task hash's ``prio`` field as the scripts read it: 0 unless a whole number in -100..100."""
    try:
        number = float(value or 0)
    except (TypeError, ValueError):
        return 0
    return int(number) if number.is_integer() and MIN <= number <= MAX else 0


def score_priority(score: float) -> int:
    """The priority a ``prioritized`` score stands for."""
    return 100 - int(score // BAND)


TAIL = -(MARKERS_MAX + 1)
"""``LRANGE pending TAIL -1``: the LIST's tail, every marker in it and the next id to run (a bounded read)."""


def markers(tail: list[str] | None) -> int:
    """How many markers end a pending LIST whose tail (``LRANGE pending TAIL -1``) is ``tail``."""
    n = 0
    for entry in reversed(tail or []):
        if entry != MARKER:
            break
        n += 1
    return n


def list_length(length: int, tail: list[str] | None) -> int:
    """Tasks in a pending LIST of ``length`` whose tail (``LRANGE pending TAIL -1``) is ``tail``: its markers left out."""
    return max(0, int(length) - markers(tail))


def next_in_list(tail: list[str] | None) -> str | None:
    """The id a pending LIST gives next (its markers skipped), from its tail; None when it holds none."""
    for entry in reversed(tail or []):
        if entry != MARKER:
            return str(entry)
    return None


def ready_page(client: redis.Redis, k: QueueKeys, start: int, count: int) -> tuple[int, list[tuple[str, int]]]:
    """The queue's ready tasks ``start .. start + count`` in the order they run, with their priority; and their total.

    Three segments, each read from its own end: the ZSET's priorities above 0,
    the LIST from its tail (the next to run), the ZSET's priorities below 0.
    """
    pipe = client.pipeline(transaction=False)
    pipe.llen(k.pending)
    pipe.lrange(k.pending, TAIL, -1)
    pipe.zcount(k.prioritized, "-inf", f"({DEFAULT_SCORE}")
    pipe.zcard(k.prioritized)
    length, tail, high, ranked = pipe.execute()
    plain, skip = list_length(length, tail), markers(tail)
    total = plain + int(ranked)
    out: list[tuple[str, int]] = []
    end = start + count
    pipe = client.pipeline(transaction=False)
    parts = []
    if start < high:  # priorities above 0
        pipe.zrange(k.prioritized, start, min(end, high) - 1, withscores=True)
        parts.append("z")
    lo, hi = max(start, high) - high, min(end, high + plain) - high
    if hi > lo:  # the LIST, next to run first
        pipe.lrange(k.pending, -(hi + skip), -(lo + 1 + skip))
        parts.append("l")
    lo, hi = max(start, high + plain) - high - plain, min(end, total) - high - plain
    if hi > lo:  # priorities below 0: after the LIST, so positions go on from `high`
        pipe.zrange(k.prioritized, high + lo, high + hi - 1, withscores=True)
        parts.append("z")
    for part, reply in zip(parts, pipe.execute() if parts else [], strict=True):
        if part == "z":
            out.extend((str(i), score_priority(s)) for i, s in reply)
        else:
            out.extend((str(i), 0) for i in reversed(reply) if i != MARKER)
    return total, out
