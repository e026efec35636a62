"""Run times per task name and minute, kept in Redis with bounded memory, for the admin's "slowest tasks".

The per-worker Prometheus histograms (worker/metrics.py) live in one process
and vanish with it; an operator opening the admin wants the fleet's last hour.
So ack.lua, in the round trip that already settles a batch, adds each batch's
run times to one HASH per queue and minute (``P:durations:<minute>``, expiring
after ``TTL_MS``). Its fields are ``<task>|<bucket>`` -> count and
``<task>|n`` -> runs, where bucket ``i`` holds run times up to 2^(i/4) ms
(about 19 % wide, 1 ms to 70 min, ``BUCKETS`` of them). Only non-empty buckets
are stored, and a minute keeps at most ``MAX_NAMES`` task names (later ones
are counted under ``OTHER``), so a minute's hash holds at most
(MAX_NAMES + 1) x (BUCKETS + 1) fields however many tasks ran.

The worker groups a batch by (task, bucket) before the call, so 64 acks of
one fast task add one or two triples to the script's arguments.
Percentiles are read back by merging the hour's hashes and interpolating
inside the bucket (geometrically), within a few per cent of the true value.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

BUCKETS = 90
"""Bucket ``i`` < ``BUCKETS - 1`` holds run times up to 2^(i/4) ms; the last one everything longer (over ~70 min)."""
MAX_NAMES = 50
"""Most task names one queue-minute keeps; the runs of any further task are counted under ``OTHER``."""
TTL_MS = 65 * 60 * 1000
"""How long a minute's hash lives: the last hour, plus a margin for clocks and the current minute."""
NAME_MAX = 200
"""Characters of a task name kept (longer dotted paths are cut, not refused)."""
OTHER = "~other"
"""Where the runs of task names beyond ``MAX_NAMES`` in a minute are counted."""


def bucket(seconds: float) -> int:
    """The index of the bucket holding a run of ``seconds``."""
    ms = seconds * 1000.0
    if ms <= 1.0:
        return 0
    return min(BUCKETS - 1, math.ceil(4 * math.log2(ms) - 1e-9))


def upper_ms(index: int) -> float:
    return 2 ** (index / 4)


def triples(runs: Iterable[tuple[str, float]]) -> list[Any]:
    """ack.lua's ARGV for ``(task name, seconds)`` runs: flat (name, bucket, count) triples, grouped."""
    grouped = Counter((name[:NAME_MAX] or "?", bucket(seconds)) for name, seconds in runs)
    out: list[Any] = []
    for (name, b), n in grouped.items():
        out += (name, b, n)
    return out


@dataclass(frozen=True, slots=True)
class TaskTimes:
    """One task name's runs over a span: how many, and the p50 / p95 run time in seconds."""

    task: str
    runs: int
    p50: float
    p95: float


def merge(hashes: Iterable[dict[str, Any]]) -> dict[str, Counter[int]]:
    """Sum minute hashes into task name -> bucket counts (fields that do not parse are skipped)."""
    out: dict[str, Counter[int]] = {}
    for h in hashes:
        for field, value in (h or {}).items():
            name, _, b = str(field).rpartition("|")
            if not name or not b.isdigit() or not str(value).isdigit():
                continue  # '<task>|n', '~names' and anything unexpected
            out.setdefault(name, Counter())[int(b)] += int(value)
    return out


def percentile(counts: Counter[int], q: float) -> float:
    """The ``q`` quantile (0..1) in seconds, interpolated geometrically inside its bucket."""
    total = sum(counts.values())
    if not total:
        return 0.0
    rank, seen = q * total, 0
    for b in sorted(counts):
        n = counts[b]
        if seen + n >= rank:
            frac = (rank - seen) / n
            hi = upper_ms(min(b, BUCKETS - 2))
            lo = upper_ms(b - 1) if b else 0.0
            ms = lo + (hi - lo) * frac if not lo else lo * (hi / lo) ** frac
            return ms / 1000.0
        seen += n
    return upper_ms(BUCKETS - 2) / 1000.0


def slowest(hashes: Sequence[dict[str, Any]], top: int = 10) -> list[TaskTimes]:
    """The ``top`` task names by p95 run time over the given minute hashes, slowest first."""
    rows = [TaskTimes(name, sum(c.values()), percentile(c, 0.5), percentile(c, 0.95)) for name, c in merge(hashes).items()]
    rows.sort(key=lambda t: (-t.p95, -t.p50, t.task))
    return rows[:top]
