"""Read-only views of the queues, shared by the admin, ``manage.py redisq`` and metrics.

Nothing here changes Redis. Every read is bounded: a page of dead letters is
one ``scan_dead.lua`` call (ZCOUNT + ZREVRANGE by rank, O(log n + page)) plus
one pipelined HMGET per id on the page. A *filtered* page walks the dead set
from the newest in chunks of ``SCAN_CHUNK`` entries (one HMGET of three short
fields each, inside Redis) and stops once the page is full, so its cost is
page size / match rate, capped at ``SCAN_BUDGET`` entries per request
(measured at 4-5 µs of Redis time per entry examined; see bench/admin_scale.py).
Counting every match (the confirmation of a filtered bulk action) walks the
whole set: about half a second for 100,000.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from django.conf import settings
from django.utils.module_loading import import_string
from redis.commands.core import Script

from . import limits, scripts
from .compat import UTC
from .conf import Options, get_options
from .connection import get_client
from .durations import slowest
from .exceptions import RedisQError
from .keys import QueueKeys
from .priority import MARKER, list_length, ready_page, stored_priority
from .records import (
    TOTALS,
    Attempt,
    Pagination,
    QueueFigures,
    QueueStats,
    Scan,
    TaskDetail,
    TaskRow,
    WorkerInfo,
    pause_state,
    stored_errors,
    to_datetime,
)
from .schedules import Schedule

__all__ = [
    "Attempt",
    "DeadFilter",
    "Inspector",
    "Pagination",
    "QueueFigures",
    "QueueStats",
    "Scan",
    "ScheduleRow",
    "TaskDetail",
    "TaskRow",
    "UnknownQueue",
    "UnknownSchedule",
    "WorkerInfo",
    "backend_aliases",
    "find_schedule",
    "schedule_rows",
]

SCAN_CHUNK = 1000
"""Entries one scan_dead.lua call examines: under 10 ms of Redis time, so workers' commands interleave."""
SCAN_BUDGET = 50_000
"""Entries a filtered page may examine (about a quarter of a second) before it stops and offers to continue."""
FACET_SAMPLE = 1000
ROW_FIELDS = ("task", "state", "exc", "error", "failures", "deliveries", "enqueued_at", "last_attempted_at", "died_at", "reason",
              "prio")
MINUTES = 60


class UnknownQueue(RedisQError, LookupError):
    """A queue (or backend) the settings do not name, perhaps removed since its tasks were stored."""


def ascii_lower(text: str) -> str:
    """Lowercase ASCII only, exactly as Lua's ``string.lower`` does inside Redis."""
    return "".join(c.lower() if c.isascii() else c for c in text)


def backend_aliases() -> list[str]:
    """Aliases in ``TASKS`` served by django_redisq's backend, in settings order."""
    from .backend import RedisQueueBackend

    found = []
    for alias, params in getattr(settings, "TASKS", {}).items():
        try:
            cls = import_string(params.get("BACKEND", ""))
        except ImportError:
            continue
        if isinstance(cls, type) and issubclass(cls, RedisQueueBackend):
            found.append(alias)
    return found


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


class Inspector:
    """Read-only access to one backend alias's queues."""

    def __init__(self, options: Options, client: redis.Redis | None = None) -> None:
        self.options = options
        self.client = client or get_client(options)
        self._scan: Script | None = None

    @classmethod
    def for_alias(cls, alias: str = "default") -> Inspector:
        if alias not in backend_aliases():
            raise UnknownQueue(f"TASKS has no django_redisq backend {alias!r}")
        return cls(get_options(alias))

    @property
    def queues(self) -> tuple[str, ...]:
        return self.options.queues

    def keys(self, queue: str) -> QueueKeys:
        if queue not in self.options.queues:
            raise UnknownQueue(f"queue {queue!r} is not in TASKS[{self.options.alias!r}]['QUEUES'] {list(self.options.queues)}")
        return QueueKeys(queue, self.options.key_prefix)

    def now_ms(self) -> int:
        sec, usec = self.client.time()
        return int(sec) * 1000 + int(usec) // 1000

    # -- queue figures ---------------------------------------------------

    def stats(self) -> list[QueueStats]:
        """Figures for every configured queue in two round trips, the hour's slowest task names included."""
        now = self.now_ms()
        minute = now // 60000
        minutes = range(minute - MINUTES + 1, minute + 1)
        pipe = self.client.pipeline(transaction=False)
        for q in self.queues:
            k = self.keys(q)
            pipe.llen(k.pending)
            pipe.zcard(k.scheduled)
            pipe.zcard(k.dead)
            pipe.lindex(k.pending, -1)
            pipe.zrange(k.workers, 0, -1, withscores=True)
            pipe.zcard(k.prioritized)
            pipe.zrange(k.prioritized, 0, 0)
            limits.ask(pipe, k)
            for name in ("processed", "failed", "dead_count"):
                pipe.mget([k.counter(name, m) for m in minutes])
            for m in minutes:  # bounded: at most (MAX_NAMES + 1) x BUCKETS fields each (durations.py)
                pipe.hgetall(k.durations(m))
        self._pipe_paused(pipe)
        first = pipe.execute(raise_on_error=False)
        pauses = self._paused_from(first)
        head_n = 10 + limits.ASKED
        stride = head_n + MINUTES
        pipe = self.client.pipeline(transaction=False)
        per_queue = []
        for i, q in enumerate(self.queues):
            k = self.keys(q)
            row = first[i * stride : i * stride + head_n]
            length, scheduled, dead, oldest, workers, ranked, head = row[:7]
            asked, counters = row[7 : 7 + limits.ASKED], row[7 + limits.ASKED :]
            times = slowest(first[i * stride + head_n : (i + 1) * stride])
            pending = list_length(length, oldest) + int(ranked)
            oldest = oldest if oldest and oldest != MARKER else (head[0] if head else None)  # the next to run
            if oldest:
                pipe.hget(k.task(oldest), "enqueued_at")
            else:
                pipe.echo("")
            for w, _ in workers:
                pipe.llen(k.processing(w))
                pipe.get(k.worker_info(w))
            limits.ask_named(pipe, k, asked[0])
            per_queue.append((q, pending, scheduled, dead, workers, counters, times, asked))
        second = iter(pipe.execute())
        out = []
        fraction = (now % 60000) / 60000
        for q, pending, scheduled, dead, workers, counters, times, asked in per_queue:
            enq = next(second)
            processed, failed, died = ([int(v or 0) for v in c] for c in counters)
            infos = [self._worker(name, score, next(second), next(second), now) for name, score in workers]
            waiting, limited = limits.states(self.options.for_queue(q).max_running, asked,
                                             [next(second) for _ in range(2 * len(asked[0]))])
            pending += waiting
            out.append(QueueStats(
                alias=self.options.alias, queue=q, pending=pending, scheduled=scheduled, dead=dead,
                running=sum(w.holding for w in infos),
                oldest_pending_age=(now - int(enq)) / 1000 if enq else None,
                # a sliding last-60-seconds estimate from the current and previous minute buckets
                processed_minute=round(processed[-1] + processed[-2] * (1 - fraction)),
                failed_minute=round(failed[-1] + died[-1] + (failed[-2] + died[-2]) * (1 - fraction)),
                processed_hour=sum(processed), failed_hour=sum(failed) + sum(died), dead_hour=sum(died),
                series=[(to_datetime(m * 60000) or datetime.now(UTC), p, f, d)
                        for m, p, f, d in zip(minutes, processed, failed, died, strict=True)],
                workers=infos, slowest=times, limits=limited, rate_limit=self.options.for_queue(q).rate_limit, **pauses[q],
            ))
        return out

    def _pipe_paused(self, pipe: Any) -> None:
        """Queue a GET of every queue's pause key at the end of ``pipe`` (read back by ``_paused_from``)."""
        for q in self.queues:
            pipe.get(self.keys(q).paused)

    def _paused_from(self, replies: list[Any]) -> dict[str, dict[str, Any]]:
        """The pause fields of each queue from the last replies of a pipeline ``_pipe_paused`` ended; raises the others' errors."""
        n = len(self.queues)
        head, tail = replies[: len(replies) - n], replies[len(replies) - n :]
        for reply in head:
            if isinstance(reply, Exception):
                raise reply
        out = {}
        for q, value in zip(self.queues, tail, strict=True):
            if isinstance(value, redis.ResponseError):  # another type: fetch.lua sees it exist, so paused
                value = "0|"
            elif isinstance(value, Exception):
                raise value
            paused, since, who = pause_state(value)
            out[q] = {"paused": paused, "paused_at": since, "paused_by": who}
        del replies[len(replies) - n :]
        return out

    def figures(self) -> list[QueueFigures]:
        """Gauges and totals of every queue in two pipelined round trips, O(queues + workers) whatever the backlog.

        For metrics scrapes and health probes, which run every few seconds:
        unlike ``stats`` no per-minute series and no worker details are read.
        """
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        for q in self.queues:
            k = self.keys(q)
            pipe.llen(k.pending)
            pipe.zcard(k.scheduled)
            pipe.zcard(k.dead)
            pipe.lindex(k.pending, -1)  # the oldest: O(1) from the tail
            pipe.zrange(k.workers, 0, -1, withscores=True)
            pipe.mget([k.counter(name) for name in TOTALS])
            pipe.zcard(k.prioritized)
            pipe.zrange(k.prioritized, 0, 0)  # with no plain task pending, the next prioritized one is the oldest shown
            limits.ask(pipe, k)
        self._pipe_paused(pipe)
        first = pipe.execute(raise_on_error=False)
        pauses = self._paused_from(first)
        stride = 8 + limits.ASKED
        sec, usec = first[0]
        now = int(sec) * 1000 + int(usec) // 1000
        pipe = self.client.pipeline(transaction=False)
        for i, q in enumerate(self.queues):
            k = self.keys(q)
            row = first[1 + i * stride : 1 + (i + 1) * stride]
            oldest, workers, head = row[3], row[4], row[7]
            oldest = oldest if oldest and oldest != MARKER else (head[0] if head else None)
            pipe.hget(k.task(oldest), "enqueued_at") if oldest else pipe.echo("")
            for w, _ in workers:
                pipe.llen(k.processing(w))
            limits.ask_named(pipe, k, row[8])
        second = iter(pipe.execute())
        out = []
        for i, q in enumerate(self.queues):
            row = first[1 + i * stride : 1 + (i + 1) * stride]
            length, scheduled, dead, tail, workers, totals, ranked, _ = row[:8]
            enq = next(second)
            running = sum(int(next(second)) for _ in workers)
            waiting, _ = limits.states(0, row[8:], [next(second) for _ in range(2 * len(row[8]))])
            pending = list_length(length, tail) + int(ranked) + waiting
            age = (now - int(enq)) / 1000 if enq and str(enq).isdigit() else 0.0
            out.append(QueueFigures(
                alias=self.options.alias, queue=q, pending=int(pending), scheduled=int(scheduled), running=running, dead=int(dead),
                oldest_pending_age=max(0.0, age), workers=sum(1 for _, score in workers if now - score <= self.options.worker_timeout * 1000),
                totals={name: int(v) if v and str(v).isdigit() else 0 for name, v in zip(TOTALS, totals, strict=True)},
                **pauses[q],
            ))
        return out

    def _worker(self, name: str, score: float, holding: int, info_json: str | None, now: int) -> WorkerInfo:
        ago = max(0.0, (now - score) / 1000)
        w = WorkerInfo(name=name, last_seen=to_datetime(score), seen_ago=ago,
                       alive=ago <= self.options.worker_timeout, holding=int(holding))
        try:
            info = json.loads(info_json) if info_json else {}
        except ValueError:
            info = {}
        if isinstance(info, dict):
            w.host, w.pid = str(info.get("host", "")), info.get("pid")
            w.queues, w.concurrency = list(info.get("queues") or []), info.get("concurrency")
            w.pool = str(info.get("pool") or "threads")
            w.processed, w.current = info.get("processed"), [str(i) for i in info.get("current") or []]
            w.started_at = to_datetime(info.get("started_at"))
        return w

    # -- dead letters ----------------------------------------------------

    def scan_dead(self, queue: str, flt: DeadFilter = DeadFilter(), *, top: str = "", start: int = 0,
                  direction: int = 1, want: int = 0, budget: int | None = 0) -> Scan:
        """Walk the dead set from ``start`` until ``want`` matches (0: count all) or ``budget`` entries
        were examined (0: ``SCAN_BUDGET``; None: no limit)."""
        if budget == 0:
            budget = SCAN_BUDGET
        k = self.keys(queue)
        if self._scan is None:
            self._scan = self.client.register_script(scripts.source("scan_dead"))
        found: list[tuple[str, int]] = []
        examined = matched = 0
        pos, total, step = start, 0, want if want and not flt else SCAN_CHUNK
        while True:
            size = step if budget is None else max(0, min(step, budget - examined))
            out = self._scan(keys=[k.dead], args=[k.prefix, top, pos, direction, size,
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
            items=self.rows(queue, ids), per_page=per_page, start=start,
            total=None if flt else scan.total, next_start=nxt, top=scan.top,
            scanned=scan.examined, budget_hit=not scan.exhausted and len(scan.found) <= per_page,
        )

    def count_dead(self, queue: str, flt: DeadFilter = DeadFilter(), top: str = "") -> int:
        """Dead letters matching ``flt`` up to the snapshot: O(log n) unfiltered, a full walk filtered."""
        scan = self.scan_dead(queue, flt, top=top, budget=None if flt else 1)
        return scan.matched if flt else scan.total

    def dead_counts(self) -> dict[str, int]:
        pipe = self.client.pipeline(transaction=False)
        for q in self.queues:
            pipe.zcard(self.keys(q).dead)
        return dict(zip(self.queues, pipe.execute(), strict=True))

    def facets(self, queue: str, sample: int = FACET_SAMPLE) -> tuple[Counter[str], Counter[str]]:
        """Task and exception counts among the newest ``sample`` dead letters (for filter links)."""
        k = self.keys(queue)
        ids: list[str] = self.client.zrevrange(k.dead, 0, sample - 1)  # type: ignore[assignment]
        pipe = self.client.pipeline(transaction=False)
        for i in ids:
            pipe.hmget(k.task(i), "task", "exc")
        tasks: Counter[str] = Counter()
        excs: Counter[str] = Counter()
        for task, exc in pipe.execute():
            tasks[task or ""] += 1
            excs[exc or ""] += 1
        return tasks, excs

    def present_dead(self, queue: str, ids: list[str]) -> list[str]:
        """The ids that are in ``queue``'s dead-letter set, in the order given (one round trip)."""
        k = self.keys(queue)
        pipe = self.client.pipeline(transaction=False)
        for i in ids:
            pipe.zscore(k.dead, i)
        return [i for i, score in zip(ids, pipe.execute(), strict=True) if score is not None]

    def dead_queue_of(self, ids: list[str]) -> dict[str, str]:
        """Which configured queue's dead-letter set holds each id (ids found nowhere are left out)."""
        pipe = self.client.pipeline(transaction=False)
        for q in self.queues:
            for i in ids:
                pipe.zscore(self.keys(q).dead, i)
        scores = iter(pipe.execute())
        found: dict[str, str] = {}
        for q in self.queues:
            for i in ids:
                if next(scores) is not None:
                    found.setdefault(i, q)
        return found

    # -- tasks -----------------------------------------------------------

    def task_queues(self, ids: list[str]) -> dict[str, str]:
        """Which configured queue holds a task hash for each id (ids found nowhere are left out); one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for q in self.queues:
            for i in ids:
                pipe.exists(self.keys(q).task(i))
        found = iter(pipe.execute())
        out: dict[str, str] = {}
        for q in self.queues:
            for i in ids:
                if next(found):
                    out.setdefault(i, q)
        return out

    def rows(self, queue: str, ids: list[str], extra: dict[str, tuple[Any, str]] | None = None) -> list[TaskRow]:
        """Rows for ``ids`` in one round trip; ids whose hash is gone are dropped."""
        k = self.keys(queue)
        pipe = self.client.pipeline(transaction=False)
        for i in ids:
            pipe.hmget(k.task(i), ROW_FIELDS)
        rows = []
        for i, values in zip(ids, pipe.execute(), strict=True):
            if not any(values):
                continue
            row = self._row(i, queue, dict(zip(ROW_FIELDS, values, strict=True)))
            if extra and i in extra:
                score, worker = extra[i]
                row.due_at, row.worker = to_datetime(score), worker
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
            enqueued_at=to_datetime(f.get("enqueued_at")), last_attempted_at=to_datetime(f.get("last_attempted_at")),
            died_at=to_datetime(f.get("died_at")), reason=f.get("reason") or "", priority=stored_priority(f.get("prio")),
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
        """Ids in the processing lists of the queue's registered workers (bounded by their prefetch)."""
        k = self.keys(queue)
        workers: list[str] = self.client.zrange(k.workers, 0, -1)  # type: ignore[assignment]
        pipe = self.client.pipeline(transaction=False)
        for w in workers:
            pipe.lrange(k.processing(w), 0, -1)
        held = [(i, w) for w, ids in zip(workers, pipe.execute(), strict=True) for i in reversed(ids)]
        start = (max(1, page) - 1) * per_page
        chosen = held[start : start + per_page]
        rows = self.rows(queue, [i for i, _ in chosen], {i: (None, w) for i, w in chosen})
        return Pagination(rows, per_page, start, len(held), start + per_page if start + per_page < len(held) else None)

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
                            started_at=to_datetime(data.get("started_at")), finished_at=to_datetime(data.get("finished_at")),
                            result=data.get("result"), replayed=data.get("replayed", "0") not in ("", "0"),
                            dead_score=to_datetime(dead_score))
        try:
            msg = json.loads(detail.raw_message)
            if not isinstance(msg, dict):
                raise ValueError(f"a JSON {type(msg).__name__}, not an object")
            detail.args, detail.kwargs = msg.get("args", []), msg.get("kwargs", {})
        except ValueError as exc:
            detail.message_error = f"the stored message does not decode: {exc}" if detail.raw_message else "no message stored"
        for e in stored_errors(data.get("errors"), data.get("errors_dropped")):
            detail.attempts.append(Attempt(e["exc"], e["msg"], e["tb"], to_datetime(e["at"])))
        return detail


# -- periodic schedules ------------------------------------------------------


class UnknownSchedule(RedisQError, LookupError):
    """A schedule the settings do not name, or one they name with errors (it is not run)."""


def find_schedule(ins: Inspector, name: str) -> Schedule:
    """The configured, valid schedule ``name`` of the alias; ``UnknownSchedule`` (saying why) otherwise."""
    from .schedules import load

    good, bad = load(ins.options.alias, ins.options.queues, ins.options.schedules)
    for s in good:
        if s.name == name:
            return s
    if name in bad:
        raise UnknownSchedule(f"schedule {name!r} has errors and is not run: " + " ".join(f"[{p.id}] {p.msg}" for p in bad[name]))
    raise UnknownSchedule(f"no schedule {name!r} in TASKS[{ins.options.alias!r}] (SCHEDULES or @periodic)")


@dataclass(frozen=True)
class ScheduleRow:
    """One periodic schedule as the admin and ``redisq schedules`` show it (times on the Redis clock)."""

    name: str
    task: str
    queue: str
    expression: str
    timezone: str
    catch_up: str
    allow_overlap: bool
    next_run: datetime | None
    last_run: datetime | None  # the tick of the last task enqueued, or when the last "run now" was, if later
    last_id: str
    fired: int
    missed: int
    skipped: int
    problems: list[str]
    description: str = ""  # the expression in words ("daily at 03:00")
    paused: bool = False
    paused_at: datetime | None = None
    paused_by: str = ""
    paused_ticks: int = 0  # ticks not run because the schedule was paused
    last_state: str = ""  # the last task's state; '' once its hash has expired (or there is none)
    last_manual: bool = False  # the last run was a "run now"


def _count(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def schedule_rows(ins: Inspector) -> list[ScheduleRow]:
    """Every schedule of the alias, valid or not, with its marker and its last task's state, in two round trips."""
    from .schedules import load

    good, bad = load(ins.options.alias, ins.options.queues, ins.options.schedules)
    now = ins.now_ms()
    pipe = ins.client.pipeline(transaction=False)
    for s in good:
        pipe.hgetall(ins.keys(s.queue).schedule(s.name))
    markers: list[dict[str, str]] = pipe.execute() if good else []
    last: list[tuple[int, str, bool]] = []  # (ms, task id, run now) of each schedule's last run
    for m in markers:
        tick, manual = _count(m.get("last_run")), _count(m.get("manual_at"))
        if manual > tick and m.get("manual_id"):
            last.append((manual, m["manual_id"], True))
        else:
            last.append((tick, m.get("last_id", ""), False))
    pipe = ins.client.pipeline(transaction=False)
    for s, (_, task_id, _) in zip(good, last, strict=True):
        if task_id:
            pipe.hget(ins.keys(s.queue).task(task_id), "state")
        else:
            pipe.echo("")
    states = pipe.execute() if good else []

    rows = [
        ScheduleRow(s.name, s.task, s.queue, s.expression, s.tz.key, s.catch_up, s.allow_overlap,
                    to_datetime(s.next_after(now)), to_datetime(at), task_id,
                    _count(m.get("fired")), _count(m.get("missed")), _count(m.get("skipped")), [],
                    description=s.in_words, paused=bool(m.get("paused")), paused_at=to_datetime(m.get("paused")),
                    paused_by=m.get("paused_by", ""), paused_ticks=_count(m.get("paused_ticks")),
                    last_state=state or "", last_manual=manual)
        for s, m, (at, task_id, manual), state in zip(good, markers, last, states, strict=True)
    ]
    rows += [ScheduleRow(name, "", "", "", "", "", True, None, None, "", 0, 0, 0, [f"[{p.id}] {p.msg}" for p in ps])
             for name, ps in bad.items()]
    return sorted(rows, key=lambda r: r.name)
