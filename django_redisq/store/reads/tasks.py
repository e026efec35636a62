"""Read-only views of stored tasks: dead-letter pages, scans, facets; task rows, lists and one task's detail.

The task half of the store's reads (``class QueueReads(TaskReads)``, store/reads/queues.py,
which ``Inspector`` in ops/inspector.py is): queues.py reads the queues' figures, this
module the tasks in them.
Every read is bounded: a page of dead letters is one ``scan_dead.lua`` call (ZCOUNT +
ZREVRANGE by rank, O(log n + page)) plus one pipelined HMGET per id on the page. A
*filtered* page walks the dead set from the newest in chunks of ``SCAN_CHUNK`` entries
(one HMGET of three short fields each, inside Redis) and stops once the page is full,
so its cost is page size / match rate, capped at ``SCAN_BUDGET`` entries per request
(measured at 4-5 µs of Redis time per entry examined; see bench/admin_scale.py).
Counting every match (the confirmation of a filtered bulk action) walks the whole set:
about half a second for 100,000.
A partitioned queue's dead letters are one list: a k-way merge of its partitions' dead
sets (store/reads/dead_scan.py).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

import redis

from django_redisq.connection import get_client
from django_redisq.core import partitions
from django_redisq.core.clock import ms_to_datetime
from django_redisq.core.options import Options
from django_redisq.core.partitions import logical
from django_redisq.exceptions import UnknownQueue
from django_redisq.progress import decode as decode_progress
from django_redisq.store.keys import QueueKeys
from django_redisq.store.reads.dead_scan import SCAN_CHUNK, DeadFilter, MergedDeadScan
from django_redisq.store.reads.errors import stored_errors
from django_redisq.store.reads.priority import ready_page, stored_priority
from django_redisq.store.reads.records import Attempt, Pagination, Scan, TaskDetail, TaskRow
from django_redisq.store.scripts.runner import ScriptRunner
from django_redisq.store.steps.running import marked

SCAN_BUDGET = 50_000
"""Entries a filtered page may examine (about a quarter of a second) before it stops and offers to continue."""
FACET_SAMPLE = 1000
ROW_FIELDS = ("task", "state", "exc", "error", "failures", "deliveries", "enqueued_at", "last_attempted_at", "died_at", "reason",
              "prio", "progress")


class TaskReads:
    """The task half of ``Inspector``: the bounded reads of the tasks in one backend alias's queues."""

    def __init__(self, options: Options, client: redis.Redis | None = None) -> None:
        self.options = options
        self.client = client or get_client(options)
        self.scripts = ScriptRunner(options, self.client)  # the read-only scripts: scan_dead.lua, dead_window.lua
        self.merged = MergedDeadScan(self.scripts)

    @property
    def queues(self) -> tuple[str, ...]:
        return self.options.queues

    @property
    def physical_queues(self) -> list[str]:
        """Every partition of every queue (core/partitions.py): the queues themselves when none is partitioned."""
        return self.options.physical_all(self.options.queues)

    def keys(self, queue: str) -> QueueKeys:
        """The keys of a queue, or of one partition of a partitioned queue (``events~3``)."""
        if queue not in self.options.queues and not (
                partitions.SEP in queue and partitions.logical(queue) in self.options.queues
                and queue in self.options.physical(partitions.logical(queue))):
            raise UnknownQueue(f"queue {queue!r} is not in TASKS[{self.options.alias!r}]['QUEUES'] {list(self.options.queues)}")
        return QueueKeys(queue, self.options.key_prefix)

    # -- dead letters ----------------------------------------------------

    def scan_dead(self, queue: str, flt: DeadFilter = DeadFilter(), *, top: str = "", start: int = 0,
                  direction: int = 1, want: int = 0, budget: int | None = 0) -> Scan:
        """Walk the dead set from ``start`` until ``want`` matches (0: count all) or ``budget`` entries
        were examined (0: ``SCAN_BUDGET``; None: no limit)."""
        if budget == 0:
            budget = SCAN_BUDGET
        if self.options.partitions(queue) > 1:
            return self.merged.scan(self.options.physical(queue), flt, top, start, direction, want, budget)
        k = self.keys(queue)
        found: list[tuple[str, int]] = []
        examined = matched = 0
        pos, total, step = start, 0, want if want and not flt else SCAN_CHUNK
        while True:
            size = step if budget is None else max(0, min(step, budget - examined))
            out = self.scripts.run("scan_dead", keys=[k.dead], args=[k.prefix, top, pos, direction, size,
                                                                     want - len(found) if want else 0, *flt.args()])
            top, total, pos, n, m = str(out[0]), int(out[1]), int(out[2]), int(out[3]), int(out[4])
            found.extend((out[i], int(out[i + 1])) for i in range(5, len(out), 2))
            examined, matched = examined + n, matched + m
            at_end = pos >= total if direction > 0 else pos <= 0
            if at_end or n == 0 or (want and len(found) >= want) or (budget is not None and examined >= budget):
                return Scan(top, total, pos, examined, matched, found, at_end or n == 0)

    def dead_page(self, queue: str, flt: DeadFilter = DeadFilter(), *, start: int = 0, per_page: int = 50,
                  top: str = "", before: int | None = None, budget: int = 0) -> Pagination:
        """Newest first. ``before`` asks for the page of matches just newer than that position."""
        start = max(0, start)
        if before is not None and before > 0:
            # one match more than a page: if there is none, this page is the first and starts at 0
            back = self.scan_dead(queue, flt, top=top, start=before, direction=-1, want=per_page + 1, budget=budget)
            top = back.top
            if len(back.found) > per_page:
                start = back.found[per_page - 1][1]
            else:
                start = 0 if back.exhausted else back.next
        elif before is not None:
            start = 0
        scan = self.scan_dead(queue, flt, top=top, start=start, want=per_page + 1, budget=budget)
        ids = [i for i, _ in scan.found[:per_page]]
        if len(scan.found) > per_page:
            nxt: int | None = scan.found[per_page][1]
        else:
            nxt = None if scan.exhausted else scan.next
        return Pagination(
            items=self.rows(queue, ids, where=scan.where), per_page=per_page, start=start,
            total=None if flt else scan.total, next_start=nxt, top=scan.top,
            scanned=scan.examined, budget_hit=not scan.exhausted and len(scan.found) <= per_page,
        )

    def count_dead(self, queue: str, flt: DeadFilter = DeadFilter(), top: str = "") -> int:
        """Dead letters matching ``flt`` up to the snapshot: O(log n) unfiltered, a full walk filtered."""
        scan = self.scan_dead(queue, flt, top=top, budget=None if flt else 1)
        return scan.matched if flt else scan.total

    def dead_counts(self) -> dict[str, int]:
        """Dead letters per queue, every partition of a partitioned one summed; one round trip."""
        qs = self.physical_queues
        pipe = self.client.pipeline(transaction=False)
        for q in qs:
            pipe.zcard(self.keys(q).dead)
        out = dict.fromkeys(self.queues, 0)
        for q, n in zip(qs, pipe.execute(), strict=True):
            out[logical(q)] += int(n)
        return out

    def facets(self, queue: str, sample: int = FACET_SAMPLE) -> tuple[Counter[str], Counter[str]]:
        """Task and exception counts among the newest ``sample`` dead letters (for filter links)."""
        qs = self.options.physical(queue) if queue in self.queues else [queue]
        homes = [self.keys(q) for q in qs]
        each = max(1, sample // len(homes))  # a partitioned queue: the newest of each partition
        pipe = self.client.pipeline(transaction=False)
        for k in homes:
            pipe.zrevrange(k.dead, 0, each - 1)
        picked = [(k, i) for k, ids in zip(homes, pipe.execute(), strict=True) for i in ids]
        pipe = self.client.pipeline(transaction=False)
        for k, i in picked:
            pipe.hmget(k.task(i), "task", "exc")
        tasks: Counter[str] = Counter()
        excs: Counter[str] = Counter()
        for task, exc in pipe.execute():
            tasks[task or ""] += 1
            excs[exc or ""] += 1
        return tasks, excs

    def present_dead(self, queue: str, ids: list[str]) -> list[str]:
        """The ids that are in ``queue``'s dead-letter set (any partition's), in the order given (one round trip)."""
        return [i for i in ids if i in self.dead_partition_of(queue, ids)]

    def dead_partition_of(self, queue: str, ids: list[str]) -> dict[str, str]:
        """Which partition of ``queue`` (``queue`` itself if it has one) holds each dead id; the rest left out."""
        return self._dead_homes(self.options.physical(queue) if queue in self.queues else [queue], ids)

    def dead_queue_of(self, ids: list[str]) -> dict[str, str]:
        """Which configured queue's dead-letter set holds each id (ids found nowhere are left out).

        For a partitioned queue, the partition (``events~3``): a replay goes back there.
        """
        return self._dead_homes(self.physical_queues, ids)

    def _dead_homes(self, qs: Sequence[str], ids: list[str]) -> dict[str, str]:
        """The first of the physical queues ``qs`` whose dead-letter set holds each id, in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for q in qs:
            for i in ids:
                pipe.zscore(self.keys(q).dead, i)
        scores = iter(pipe.execute())
        found: dict[str, str] = {}
        for q in qs:
            for i in ids:
                if next(scores) is not None:
                    found.setdefault(i, q)
        return found

    # -- tasks -----------------------------------------------------------

    def task_queues(self, ids: list[str]) -> dict[str, str]:
        """Which configured queue (or partition of one) holds a task hash for each id (ids found nowhere are left out); one round trip."""
        qs = self.physical_queues
        pipe = self.client.pipeline(transaction=False)
        for q in qs:
            for i in ids:
                pipe.exists(self.keys(q).task(i))
        found = iter(pipe.execute())
        out: dict[str, str] = {}
        for q in qs:
            for i in ids:
                if next(found):
                    out.setdefault(i, q)
        return out

    def rows(self, queue: str, ids: list[str], extra: dict[str, tuple[Any, str]] | None = None,
             where: dict[str, str] | None = None) -> list[TaskRow]:
        """Rows for ``ids`` in one round trip; ids whose hash is gone are dropped.

        ``where``: the partition of each id (a partitioned queue's dead letters); the row names it.
        """
        k = self.keys(queue)
        homes = {q: self.keys(q) for q in set(where.values())} if where else {}
        pipe = self.client.pipeline(transaction=False)
        for i in ids:
            pipe.hmget(homes[where[i]].task(i) if where and i in where else k.task(i), ROW_FIELDS)
        rows = []
        for i, values in zip(ids, pipe.execute(), strict=True):
            if not any(values):
                continue
            row = self._row(i, where.get(i, queue) if where else queue, dict(zip(ROW_FIELDS, values, strict=True)))
            if extra and i in extra:
                score, worker = extra[i]
                row.due_at, row.worker = ms_to_datetime(score), worker
            rows.append(row)
        return rows

    @staticmethod
    def _row(task_id: str, queue: str, f: dict[str, Any]) -> TaskRow:
        def number(name: str) -> int:
            try:
                return int(f.get(name) or 0)
            except ValueError:
                return 0

        return TaskRow(
            id=task_id, queue=queue, task=f.get("task") or "", state=f.get("state") or "", exc=f.get("exc") or "",
            error=f.get("error") or "", failures=number("failures"), deliveries=number("deliveries"),
            enqueued_at=ms_to_datetime(f.get("enqueued_at")), last_attempted_at=ms_to_datetime(f.get("last_attempted_at")),
            died_at=ms_to_datetime(f.get("died_at")), reason=f.get("reason") or "", priority=stored_priority(f.get("prio")),
            progress=decode_progress(f.get("progress")),
        )

    def scheduled_page(self, queue: str, page: int = 1, per_page: int = 50) -> Pagination:
        """Soonest due first (ZRANGE by rank: O(log n + page))."""
        k = self.keys(queue)
        start = (max(1, page) - 1) * per_page
        pipe = self.client.pipeline(transaction=False)
        pipe.zcard(k.scheduled)
        pipe.zrange(k.scheduled, start, start + per_page - 1, withscores=True)
        total, entries = pipe.execute()
        rows = self.rows(queue, [i for i, _ in entries], {i: (s, "") for i, s in entries})
        return Pagination(rows, per_page, start, total, start + per_page if start + per_page < total else None)

    def pending_page(self, queue: str, page: int = 1, per_page: int = 50) -> Pagination:
        """Next to run first (the right end of the list)."""
        start = (max(1, page) - 1) * per_page
        total, ready = ready_page(self.client, self.keys(queue), start, per_page)
        rows = self.rows(queue, [i for i, _ in ready])
        return Pagination(rows, per_page, start, total, start + per_page if start + per_page < total else None)

    def running_page(self, queue: str, page: int = 1, per_page: int = 50) -> Pagination:
        """Ids in the processing lists of the queue's registered workers (bounded by their prefetch): those running
        first (a worker's mark, store/steps/running.py), then those held, each row's state saying which."""
        k = self.keys(queue)
        workers: list[str] = self.client.zrange(k.workers, 0, -1)  # type: ignore[assignment]
        pipe = self.client.pipeline(transaction=False)
        for w in workers:
            pipe.lrange(k.processing(w), 0, -1)
            pipe.get(k.running(w))
        replies = pipe.execute()
        running: list[tuple[str, str]] = []
        held: list[tuple[str, str]] = []
        for n, w in enumerate(workers):
            ids, mark = replies[2 * n], marked(replies[2 * n + 1])
            for i in reversed(ids):
                (running if i in mark else held).append((i, w))
        both = running + held
        start = (max(1, page) - 1) * per_page
        chosen = both[start : start + per_page]
        rows = self.rows(queue, [i for i, _ in chosen], {i: (None, w) for i, w in chosen})
        is_running = {i for i, _ in running}
        for row in rows:
            if row.id not in is_running and row.state == "running":  # fetch.lua wrote 'running': it has not started
                row.state = "held"
        return Pagination(rows, per_page, start, len(both), start + per_page if start + per_page < len(both) else None,
                          running=len(running))

    def task(self, queue: str, task_id: str) -> TaskDetail | None:
        """Everything stored about one task, or None. A message that does not decode is reported, not raised."""
        k = self.keys(queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(k.task(task_id))
        pipe.zscore(k.dead, task_id)
        data, dead_score = pipe.execute()
        if not data:
            return None
        detail = TaskDetail(row=self._row(task_id, queue, data), raw_message=data.get("msg", ""), idempotency_key=data.get("idem", ""),
                            workers=[w for w in data.get("workers", "").split(",") if w],
                            started_at=ms_to_datetime(data.get("started_at")), finished_at=ms_to_datetime(data.get("finished_at")),
                            result=data.get("result"), replayed=data.get("replayed", "0") not in ("", "0"),
                            replays=_count(data.get("replayed")), errors_dropped=_count(data.get("errors_dropped")),
                            dead_score=ms_to_datetime(dead_score),
                            progress=decode_progress(data.get("progress"), ms_to_datetime(data.get("progress_at"))))
        if detail.row.state == "running" and detail.workers:  # fetch.lua's word: running only if its worker's mark says so
            if task_id not in marked(self.client.get(k.running(detail.workers[-1]))):
                detail.row.state = "held"
        try:
            msg = json.loads(detail.raw_message)
            if not isinstance(msg, dict):
                raise ValueError(f"a JSON {type(msg).__name__}, not an object")
            detail.args, detail.kwargs = msg.get("args", []), msg.get("kwargs", {})
        except (ValueError, RecursionError) as exc:
            detail.message_error = f"the stored message does not decode: {exc}" if detail.raw_message else "no message stored"
        for e in stored_errors(data.get("errors"), data.get("errors_dropped")):
            detail.attempts.append(Attempt(e["exc"], e["msg"], e["tb"], ms_to_datetime(e["at"])))
        return detail


def _count(text: str | None) -> int:
    """A stored count, 0 for none or for what another producer left that is not one."""
    try:
        return max(0, int(text or 0))
    except ValueError:
        return 0
