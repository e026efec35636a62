"""The figures of a partitioned queue's partitions summed into one row per logical queue (core/partitions.py).

``Inspector.stats`` and ``Inspector.figures`` read every physical queue in the same
round trips; these turn their rows back into the logical queues the admin, the
``redisq`` command, metrics and health show.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from django_redisq.core import partitions
from django_redisq.store.reads.durations import slowest
from django_redisq.store.reads.records import QueueFigures, QueueStats, WorkerInfo


def _groups(queues: Sequence[str], rows: Sequence[Any]) -> list[list[Any]]:
    """Rows of physical queues grouped by logical queue, in settings order (partition 0 first)."""
    by: dict[str, list[Any]] = {q: [] for q in queues}
    for row in rows:
        by[partitions.logical(row.queue)].append(row)
    return list(by.values())


COUNTS = ("pending", "scheduled", "running", "held", "dead", "ready")
"""The counts both kinds of row sum over a queue's partitions."""


def _summed(group: Sequence[Any], names: Sequence[str]) -> dict[str, int]:
    """Each named count summed over the partitions' rows."""
    return {name: sum(getattr(r, name) for r in group) for name in names}


def merged_stats(queues: Sequence[str], rows: list[QueueStats], raw: dict[str, list[Any]]) -> list[QueueStats]:
    """One ``QueueStats`` per logical queue: the figures of its partitions summed (core/partitions.py)."""
    out = []
    for group in _groups(queues, rows):
        first = group[0]
        if len(group) == 1:
            out.append(first)
            continue
        workers: dict[str, WorkerInfo] = {}
        for row in group:
            for w in row.workers:
                if w.name in workers:
                    workers[w.name].holding += w.holding
                    workers[w.name].running += w.running
                else:
                    workers[w.name] = replace(w)
        ages = [r.oldest_pending_age for r in group if r.oldest_pending_age is not None]
        out.append(replace(
            first, **_summed(group, (*COUNTS, "processed_minute", "failed_minute", "processed_hour", "failed_hour", "dead_hour")),
            oldest_pending_age=max(ages) if ages else None,
            series=[(m[0][0], sum(x[1] for x in m), sum(x[2] for x in m), sum(x[3] for x in m))
                    for m in zip(*(r.series for r in group), strict=True)],
            workers=list(workers.values()),
            slowest=slowest([h for r in group for h in raw[r.queue]]),
            limits=[lim for r in group for lim in r.limits],
            paused=any(r.paused for r in group),
        ))
    return out


def merged_figures(queues: Sequence[str], rows: list[QueueFigures]) -> list[QueueFigures]:
    """One ``QueueFigures`` per logical queue: the figures of its partitions summed (core/partitions.py)."""
    out = []
    for group in _groups(queues, rows):
        first = group[0]
        if len(group) == 1:
            out.append(first)
            continue
        out.append(replace(
            first, **_summed(group, COUNTS),
            oldest_pending_age=max(r.oldest_pending_age for r in group),
            workers=max(r.workers for r in group),
            totals={name: sum(r.totals.get(name, 0) for r in group) for name in first.totals},
            paused=any(r.paused for r in group),
        ))
    return out
