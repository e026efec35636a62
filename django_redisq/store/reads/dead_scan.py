"""A partitioned queue's dead letters as one list: the k-way merge of its partitions' dead sets.

Held by ``TaskReads`` (store/reads/tasks.py), whose ``scan_dead`` it serves for a queue
with PARTITIONS > 1 (core/partitions.py).

The merged order is died-at newest first, ties by partition number, then each set's own
order: the order of one queue holding them all. A position is a rank in it, and the sum
of the partitions' ranks at that point, so pages, ``before`` and ``Progress.pos`` stay
plain numbers. ``locate`` turns one into per-partition ranks with a binary search on the
score (each step one pipelined ZCOUNT per partition); a walk then reads a window of each
set (dead_window.lua) and merges: O(partitions x (log n x log range + page)) per page,
whatever the page number. A filter is applied here, on one pipelined HMGET per entry.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from django_redisq.store.keys import QueueKeys
from django_redisq.store.reads.records import Scan
from django_redisq.store.scripts.runner import ScriptRunner

SCAN_CHUNK = 1000
"""Entries one scan_dead.lua call (or one merged step) examines: under 10 ms of Redis time, so workers' commands interleave."""


def _tail_is(value: str | None, wanted: str) -> bool:
    """As ``tail_is`` in scan_dead.lua: a full dotted path or its trailing part."""
    if not wanted:
        return True
    if not value:
        return False
    return value == wanted or (len(value) > len(wanted) and value.endswith("." + wanted))


def matches(task_id: str, fields: list[str | None], args: list[str]) -> bool:
    """Whether a dead letter matches ``DeadFilter.args()``, exactly as scan_dead.lua decides."""
    task, exc, error = fields
    want_task, want_exc, search, typed = args
    if not (_tail_is(task, want_task) and _tail_is(exc, want_exc)):
        return False
    return not search or task_id == typed or (error is not None and search in ascii_lower(error))


def ascii_lower(text: str) -> str:
    """Lowercase ASCII only, exactly as Lua's ``string.lower`` does inside Redis."""
    return "".join(c.lower() if c.isascii() else c for c in text)


@dataclass(frozen=True, slots=True)
class DeadFilter:
    """Which dead letters to show: task and exception match a full path or its trailing part."""

    task: str = ""
    exc: str = ""
    search: str = ""

    def __bool__(self) -> bool:
        return bool(self.task or self.exc or self.search)

    def args(self) -> list[str]:
        """ARGV[7..10] of scan_dead.lua."""
        return [self.task.strip(), self.exc.strip(), ascii_lower(self.search.strip()), self.search.strip()]


class _Walk:
    """One merged walk's state: a window of each partition's dead set buffered, taken in merged order from ``pos``."""

    def __init__(self, runner: ScriptRunner, dead: list[str], top: str, totals: list[int], cursor: list[int],
                 forward: bool, pos: int) -> None:
        self.runner, self.dead, self.top, self.totals, self.forward, self.pos = runner, dead, top, totals, forward, pos
        self.fetched = list(cursor)  # how far each partition's window reached (forward: next rank; back: one past it)
        self.buffers: list[deque[tuple[str, float]]] = [deque() for _ in dead]

    def refill(self, size: int) -> None:
        """Read the next window (dead_window.lua, pipelined) of each partition whose buffer ran dry."""
        forward, fetched = self.forward, self.fetched
        need = [p for p, buf in enumerate(self.buffers)
                if not buf and (fetched[p] < self.totals[p] if forward else fetched[p] > 0)]
        if not need:
            return
        pipe = self.runner.client.pipeline(transaction=False)
        for p in need:
            lo, hi = (fetched[p], fetched[p] + size - 1) if forward else (max(0, fetched[p] - size), fetched[p] - 1)
            self.runner.run("dead_window", keys=[self.dead[p]], args=[self.top, lo, hi], pipe=pipe)
        for p, out in zip(need, pipe.execute(), strict=True):
            got = [(str(out[i]), float(out[i + 1])) for i in range(1, len(out), 2)]
            if not forward:
                got.reverse()
            self.buffers[p].extend(got)
            fetched[p] += len(got) if forward else -len(got)
            if not got:  # the set shrank under the snapshot: treat this partition as walked
                fetched[p] = self.totals[p] if forward else 0

    def take(self, size: int) -> list[tuple[str, int, int]]:
        """Up to ``size`` entries in merged order: (id, partition, its merged rank)."""
        batch: list[tuple[str, int, int]] = []
        while len(batch) < size:
            self.refill(size)
            heads = [(buf[0][1], -p, p) for p, buf in enumerate(self.buffers) if buf]
            if not heads:
                break
            _, _, p = max(heads) if self.forward else min(heads)
            task_id, _ = self.buffers[p].popleft()
            if self.forward:
                batch.append((task_id, p, self.pos))
                self.pos += 1
            else:
                self.pos -= 1
                batch.append((task_id, p, self.pos))
        return batch


class MergedDeadScan:
    """The merged walk of several dead sets (``TaskReads.scan_dead`` of a partitioned queue)."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner

    def _counts(self, dead: list[str], lo: str, hi: str) -> list[int]:
        pipe = self.runner.client.pipeline(transaction=False)
        for key in dead:
            pipe.zcount(key, lo, hi)
        return [int(n) for n in pipe.execute()]

    def locate(self, dead: list[str], top: str, totals: list[int], rank: int) -> list[int]:
        """Per-partition ranks whose sum is ``rank`` in the merged order (clamped to the ends)."""
        if rank <= 0:
            return [0] * len(dead)
        if rank >= sum(totals):
            return list(totals)
        pipe = self.runner.client.pipeline(transaction=False)
        for key in dead:
            pipe.zrangebyscore(key, "-inf", top, start=0, num=1, withscores=True)
        oldest = [got[0][1] for got in pipe.execute() if got]
        lo, hi = math.floor(min(oldest)), math.floor(float(top))  # scores are whole milliseconds
        while lo < hi:  # the highest score s with more than ``rank`` entries at or above it (within top)
            mid = (lo + hi + 1) // 2
            if sum(self._counts(dead, str(mid), top)) > rank:
                lo = mid
            else:
                hi = mid - 1
        newer = self._counts(dead, f"({lo}", top)
        ties = self._counts(dead, str(lo), str(lo))
        left = rank - sum(newer)
        out = []
        for n, t in zip(newer, ties, strict=True):
            take = min(left, t)
            out.append(n + take)
            left -= take
        return out

    def _newest(self, dead: list[str]) -> str:
        """The snapshot's top: the newest score of any partition ('0' when all are empty)."""
        pipe = self.runner.client.pipeline(transaction=False)
        for key in dead:
            pipe.zrevrange(key, 0, 0, withscores=True)
        newest = [got[0][1] for got in pipe.execute() if got]
        return f"{max(newest):.17g}" if newest else "0"

    def _fields(self, keys: list[QueueKeys], batch: list[tuple[str, int, int]]) -> list[Any]:
        """What a filter looks at of each entry of ``batch``: task, exc, error (one pipelined HMGET each)."""
        pipe = self.runner.client.pipeline(transaction=False)
        for task_id, p, _ in batch:
            pipe.hmget(keys[p].task(task_id), "task", "exc", "error")
        return list(pipe.execute())

    def scan(self, qs: list[str], flt: DeadFilter, top: str, start: int, direction: int, want: int,
             budget: int | None) -> Scan:
        """``scan_dead`` over every partition of a queue, merged by died-at time; positions as for one set."""
        keys = [self.runner.keys(q) for q in qs]
        dead = [k.dead for k in keys]
        top = top or self._newest(dead)
        totals = self._counts(dead, "-inf", top)
        total = sum(totals)
        start = max(0, min(start, total))
        walk = _Walk(self.runner, dead, top, totals, self.locate(dead, top, totals, start), direction > 0, start)
        args = flt.args()
        found: list[tuple[str, int]] = []
        where: dict[str, str] = {}
        examined = matched = 0
        while True:
            size = want - len(found) if want and not flt else SCAN_CHUNK
            if budget is not None:
                size = max(0, min(size, budget - examined))
            batch = walk.take(size)
            fields = self._fields(keys, batch) if flt and batch else [None] * len(batch)
            done, nxt = False, walk.pos
            for (task_id, p, rank), f in zip(batch, fields, strict=True):
                examined += 1
                if flt and not matches(task_id, f, args):
                    continue
                matched += 1
                if want:
                    found.append((task_id, rank))
                    where[task_id] = qs[p]
                    if len(found) >= want:
                        nxt, done = (rank + 1 if walk.forward else rank), True
                        break
            at_end = nxt >= total if walk.forward else nxt <= 0
            if done or at_end or not batch or (budget is not None and examined >= budget):
                return Scan(top, total, nxt, examined, matched, found, at_end or not batch, where)
