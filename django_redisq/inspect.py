"""Read-only views of the queues, shared by the admin, ``manage.py redisq`` and metrics.

Nothing here changes Redis. ``Inspector`` reads a backend's queues: their figures
(``stats`` for the admin and ``redisq stats``, ``figures`` for metrics scrapes and
health probes, each two pipelined round trips whatever the backlog); the tasks in them
come from ``TaskReads`` (inspect_tasks.py: dead-letter pages, scans, task lists and
details), of which it is made; the periodic schedules' rows are at the end of this module.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis
from django.conf import settings
from django.utils.module_loading import import_string
from redis.commands.core import Script

from . import limits, partitions
from .compat import UTC
from .conf import Options, get_options
from .connection import get_client
from .durations import slowest
from .exceptions import RedisQError
from .inspect_tasks import DeadFilter, TaskReads
from .keys import QueueKeys
from .partition_stats import merged_figures, merged_stats
from .priority import MARKER, list_length
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

MINUTES = 60


class UnknownQueue(RedisQError, LookupError):
    """A queue (or backend) the settings do not name, perhaps removed since its tasks were stored."""


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


class Inspector(TaskReads):
    """Read-only access to one backend alias's queues."""

    def __init__(self, options: Options, client: redis.Redis | None = None) -> None:
        self.options = options
        self.client = client or get_client(options)
        self._scan: Script | None = None
        self._dead_window: Script | None = None

    @classmethod
    def for_alias(cls, alias: str = "default") -> Inspector:
        if alias not in backend_aliases():
            raise UnknownQueue(f"TASKS has no django_redisq backend {alias!r}")
        return cls(get_options(alias))

    @property
    def queues(self) -> tuple[str, ...]:
        return self.options.queues

    @property
    def physical_queues(self) -> list[str]:
        """Every partition of every queue (partitions.py): the queues themselves when none is partitioned."""
        return self.options.physical_all(self.options.queues)

    def keys(self, queue: str) -> QueueKeys:
        """The keys of a queue, or of one partition of a partitioned queue (``events~3``)."""
        if queue not in self.options.queues and not (
                partitions.SEP in queue and partitions.logical(queue) in self.options.queues
                and queue in self.options.physical(partitions.logical(queue))):
            raise UnknownQueue(f"queue {queue!r} is not in TASKS[{self.options.alias!r}]['QUEUES'] {list(self.options.queues)}")
        return QueueKeys(queue, self.options.key_prefix)

    def now_ms(self) -> int:
        sec, usec = self.client.time()
        return int(sec) * 1000 + int(usec) // 1000

    # -- queue figures ---------------------------------------------------

    def stats(self) -> list[QueueStats]:
        """Figures for every configured queue in two round trips, the hour's slowest task names included."""
        qs = self.physical_queues
        now = self.now_ms()
        minute = now // 60000
        minutes = range(minute - MINUTES + 1, minute + 1)
        pipe = self.client.pipeline(transaction=False)
        for q in qs:
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
                pipe.execute_command("MGET", *[k.counter(name, m) for m in minutes])  # not pipe.mget: a cluster pipeline refuses it (the keys share a slot)
            for m in minutes:  # bounded: at most (MAX_NAMES + 1) x BUCKETS fields each (durations.py)
                pipe.hgetall(k.durations(m))
        self._pipe_paused(pipe, qs)
        first = pipe.execute(raise_on_error=False)
        pauses = self._paused_from(first, qs)
        head_n = 10 + limits.ASKED
        stride = head_n + MINUTES
        pipe = self.client.pipeline(transaction=False)
        per_queue = []
        raw: dict[str, list[Any]] = {}  # per queue: its minute hashes of run times
        for i, q in enumerate(qs):
            k = self.keys(q)
            row = first[i * stride : i * stride + head_n]
            length, scheduled, dead, oldest, workers, ranked, head = row[:7]
            asked, counters = row[7 : 7 + limits.ASKED], row[7 + limits.ASKED :]
            raw[q] = first[i * stride + head_n : (i + 1) * stride]
            times = slowest(raw[q])
            pending = list_length(length, oldest) + int(ranked)
            oldest = oldest if oldest and oldest != MARKER else (head[0] if head else None)  # the next to run
            if oldest:
                pipe.hget(k.task(oldest), "enqueued_at")
            else:
                pipe.execute_command("ECHO", "")
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
        return out if len(out) == len(self.queues) else merged_stats(self.queues, out, raw)

    def _pipe_paused(self, pipe: Any, qs: Sequence[str]) -> None:
        """Queue a GET of the pause key of every queue of ``qs`` at the end of ``pipe`` (read back by ``_paused_from``)."""
        for q in qs:
            pipe.get(self.keys(q).paused)

    def _paused_from(self, replies: list[Any], qs: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The pause fields of each queue from the last replies of a pipeline ``_pipe_paused`` ended; raises the others' errors."""
        n = len(qs)
        head, tail = replies[: len(replies) - n], replies[len(replies) - n :]
        for reply in head:
            if isinstance(reply, Exception):
                raise reply
        out = {}
        for q, value in zip(qs, tail, strict=True):
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
        qs = self.physical_queues
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("TIME")  # not pipe.time() nor pipe.echo(): a cluster pipeline refuses those methods
        for q in qs:
            k = self.keys(q)
            pipe.llen(k.pending)
            pipe.zcard(k.scheduled)
            pipe.zcard(k.dead)
            pipe.lindex(k.pending, -1)  # the oldest: O(1) from the tail
            pipe.zrange(k.workers, 0, -1, withscores=True)
            pipe.execute_command("MGET", *[k.counter(name) for name in TOTALS])  # not pipe.mget: a cluster pipeline refuses it (the keys share a slot)
            pipe.zcard(k.prioritized)
            pipe.zrange(k.prioritized, 0, 0)  # with no plain task pending, the next prioritized one is the oldest shown
            limits.ask(pipe, k)
        self._pipe_paused(pipe, qs)
        first = pipe.execute(raise_on_error=False)
        pauses = self._paused_from(first, qs)
        stride = 8 + limits.ASKED
        sec, usec = first[0]
        now = int(sec) * 1000 + int(usec) // 1000
        pipe = self.client.pipeline(transaction=False)
        for i, q in enumerate(qs):
            k = self.keys(q)
            row = first[1 + i * stride : 1 + (i + 1) * stride]
            oldest, workers, head = row[3], row[4], row[7]
            oldest = oldest if oldest and oldest != MARKER else (head[0] if head else None)
            pipe.hget(k.task(oldest), "enqueued_at") if oldest else pipe.execute_command("ECHO", "")
            for w, _ in workers:
                pipe.llen(k.processing(w))
            limits.ask_named(pipe, k, row[8])
        second = iter(pipe.execute())
        out = []
        for i, q in enumerate(qs):
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
        return out if len(out) == len(self.queues) else merged_figures(self.queues, out)

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
            pipe.execute_command("ECHO", "")
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
