"""Plain records the store's reads return: rows, details, pages, worker and queue figures.

No Redis here; store/reads/queues.py and store/reads/tasks.py fill them in, ``Inspector``
(ops/inspector.py) hands them on, the admin and the command show them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.core.paginator import Paginator

from django_redisq.core.clock import ms_to_datetime
from django_redisq.progress import Progress
from django_redisq.store.reads.durations import TaskTimes


def pause_state(value: str | None) -> tuple[bool, datetime | None, str]:
    """A queue's pause key ``<Redis ms>|<who>`` as (paused, since, who); None: not paused."""
    if value is None:
        return False, None, ""
    since, _, who = str(value).partition("|")
    return True, ms_to_datetime(since), who


@dataclass(slots=True)
class LimitState:
    """One fleet-wide concurrency limit of a queue, as the admin and ``redisq stats`` show it."""

    name: str  # the task's dotted path, or '' for the queue's own MAX_RUNNING
    limit: int
    running: int  # slots taken
    waiting: int  # tasks in its blocked list
    summed: int = 0  # not one limit: the running and waiting of this many more keys (a per-key limit's long tail)


@dataclass(slots=True)
class TaskRow:
    """One line of a task list, from one HMGET."""

    id: str
    queue: str
    task: str = ""
    state: str = ""
    exc: str = ""
    error: str = ""
    failures: int = 0
    deliveries: int = 0
    enqueued_at: datetime | None = None
    last_attempted_at: datetime | None = None
    died_at: datetime | None = None
    reason: str = ""
    due_at: datetime | None = None  # scheduled tasks
    worker: str = ""  # running tasks
    priority: int = 0  # Django's priority (-100..100, higher runs first)
    progress: Progress | None = None  # what a running task last reported (progress.py)

    @property
    def exc_name(self) -> str:
        return self.exc.rsplit(".", 1)[-1]


@dataclass(slots=True)
class Attempt:
    exc: str
    message: str
    traceback: str
    at: datetime | None


@dataclass(slots=True)
class TaskDetail:
    row: TaskRow
    args: Any = None
    kwargs: Any = None
    message_error: str = ""  # why the stored message does not decode ('' = it does)
    raw_message: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)
    idempotency_key: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    result: str | None = None
    replayed: bool = False
    dead_score: datetime | None = None  # set while the id is in the dead-letter queue
    progress: Progress | None = None  # what the task last reported (progress.py)
    replays: int = 0  # times replayed (replay.lua restarts ``failures`` and ``deliveries`` at each)
    errors_dropped: int = 0  # failed attempts left out of ``attempts`` (lib/errors.lua keeps the first and the last)

    @property
    def failed_in_all(self) -> int:
        """Failed attempts across replays: the error history is kept by a replay, the ``failures`` count is not."""
        return len(self.attempts) - (1 if self.errors_dropped and self.attempts else 0) + self.errors_dropped

    @property
    def deliveries_in_all(self) -> int:
        """Deliveries across replays: the workers' list gets one entry a delivery and is kept by a replay."""
        return len(self.workers)


@dataclass(slots=True)
class Scan:
    """What a walk of the dead set saw: see scan_dead.lua."""

    top: str
    total: int
    next: int
    examined: int
    matched: int
    found: list[tuple[str, int]]
    exhausted: bool
    where: dict[str, str] = field(default_factory=dict)  # id -> partition, for a partitioned queue's walk


@dataclass(slots=True)
class Pagination:
    """A page of a list. ``total`` is None when a filter makes it unknown without a full scan."""

    items: list[TaskRow]
    per_page: int
    start: int
    total: int | None
    next_start: int | None
    top: str = ""
    scanned: int = 0
    budget_hit: bool = False
    running: int | None = None  # the running list: how many of ``total`` run now (the rest are held)

    @property
    def held(self) -> int | None:
        return None if self.running is None or self.total is None else self.total - self.running

    @property
    def number(self) -> int:
        return self.start // self.per_page + 1

    @property
    def num_pages(self) -> int | None:
        return None if self.total is None else max(1, -(-self.total // self.per_page))

    @property
    def has_previous(self) -> bool:
        return self.start > 0

    @property
    def has_next(self) -> bool:
        return self.next_start is not None

    def page_range(self) -> list[int | str]:
        if self.total is None:
            return []
        last = self.num_pages or 1
        return list(Paginator(range(self.total), self.per_page).get_elided_page_range(min(self.number, last)))


@dataclass(slots=True)
class WorkerInfo:
    name: str
    last_seen: datetime | None
    seen_ago: float  # seconds since the last heartbeat
    alive: bool
    holding: int  # ids in its processing list of this queue: running + held
    host: str = ""
    pid: int | None = None
    queues: list[str] = field(default_factory=list)
    concurrency: int | None = None
    pool: str = ""  # threads, processes or asyncio
    processed: int | None = None
    current: list[str] = field(default_factory=list)
    started_at: datetime | None = None
    running: int = 0  # of ``holding``, the tasks it runs now (its mark, store/steps/running.py): at most its concurrency

    @property
    def held(self) -> int:
        """Of ``holding``, the tasks not running: fetched and not started, or run and waiting for their ack."""
        return max(0, self.holding - self.running)


@dataclass(slots=True)
class QueueStats:
    alias: str
    queue: str
    pending: int
    scheduled: int
    running: int  # tasks the workers run now (at most their concurrency)
    dead: int
    oldest_pending_age: float | None  # seconds
    processed_minute: int
    failed_minute: int
    processed_hour: int
    failed_hour: int
    dead_hour: int
    series: list[tuple[datetime, int, int, int]]  # minute, processed, failed, dead (oldest first)
    workers: list[WorkerInfo]
    slowest: list[TaskTimes] = field(default_factory=list)  # by p95 run time over the hour, slowest first
    limits: list[LimitState] = field(default_factory=list)  # fleet-wide concurrency limits
    rate_limit: str = ""  # the queue's RATE_LIMIT, as configured
    paused: bool = False  # the queue is paused (redisq queue pause, the admin): workers start none of its tasks
    paused_at: datetime | None = None
    paused_by: str = ""
    held: int = 0  # tasks in workers' hands, not running: fetched and not started, or waiting for their ack
    ready: int = 0  # of pending, what a worker could start now: not waiting for a limit, not paused (queues.ready_now)

    @property
    def failure_rate(self) -> float | None:
        """Failed attempts and dead letters as a share of all settled attempts over the hour (None: none settled)."""
        settled = self.processed_hour + self.failed_hour
        return self.failed_hour / settled if settled else None


TOTALS = ("processed", "failed", "failed_final", "retried", "dead_count", "recovered")
"""The counters the scripts keep per queue (store/keys.py), read by ``Inspector.figures``."""


@dataclass(slots=True)
class QueueFigures:
    """What a metrics scrape or a health probe needs of one queue: O(1) reads, no per-minute series."""

    alias: str
    queue: str
    pending: int
    scheduled: int
    running: int  # tasks the registered workers run now (the ids of their marks in their processing lists)
    dead: int
    oldest_pending_age: float  # seconds; 0 when nothing is pending
    workers: int  # live: heartbeat within WORKER_TIMEOUT
    totals: dict[str, int]  # TOTALS -> count since the counters began
    paused: bool = False
    paused_at: datetime | None = None
    paused_by: str = ""
    held: int = 0  # the rest of the workers' processing lists: fetched and not started, or waiting for their ack
    ready: int = 0  # of pending, what a worker could start now: not waiting for a limit, not paused (queues.ready_now)
    limits: list[LimitState] = field(default_factory=list)  # the queue's, its tasks' and its busiest keys', the rest summed
