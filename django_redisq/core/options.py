"""``Options``: the frozen settings of one backend alias, and the naming rules every layer shares.

A leaf: no Redis, no system checks, no Django settings. ``settings/read.py`` reads and
validates ``TASKS`` into an ``Options``; the connection, store and worker layers
take one and read it, so they import this module, never the validation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from django_redisq.core import partitions

DEFAULT_PREFIX = "redisq"

NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,100}$")
"""Queue and worker names: no braces (hash tag), colons (separator) or spaces."""
WORKER_NAME_MAX = 90
"""An operator's worker name leaves room for the per-process suffix of the worker id."""

# per-queue overridable: option name -> (Options attribute, type, minimum)
TUNABLES: dict[str, tuple[str, type, float]] = {
    "MAX_RETRIES": ("max_retries", int, 0),
    "BACKOFF_BASE": ("backoff_base", float, 0),
    "BACKOFF_MAX": ("backoff_max", float, 0),
    "RESULT_TTL": ("result_ttl", float, 1),
    "IDEMPOTENCY_TTL": ("idempotency_ttl", float, 1),
    "DEAD_LETTER_TTL": ("dead_letter_ttl", float, 0),
    "DEAD_LETTER_MAX": ("dead_letter_max", int, 0),
    "RESULT_MAX_BYTES": ("result_max_bytes", int, 64),
    "METADATA_MAX_BYTES": ("metadata_max_bytes", int, 64),
    "TIMEOUT": ("timeout", float, 0),
    "WORKER_CONCURRENCY": ("worker_concurrency", int, 1),  # per worker: at most N of the queue's tasks at once
}
GLOBALS: dict[str, tuple[str, type, float]] = {
    "HEARTBEAT_INTERVAL": ("heartbeat_interval", float, 0.05),
    "WORKER_TIMEOUT": ("worker_timeout", float, 0.2),
    "PREFETCH": ("prefetch", int, 0),
    "HAND_BACK_AFTER": ("hand_back_after", float, 0.05),
    "MAX_MESSAGE_BYTES": ("max_message_bytes", int, 64),
    "SHUTDOWN_GRACE": ("shutdown_grace", float, 0),
}
QUEUE_LIMITS = {"MAX_RUNNING": "max_running", "RATE_LIMIT": "rate_limit"}
"""Fleet-wide limits of one queue (core/limits.py): only in QUEUE_OPTIONS, never for every queue at once."""
FAIR = "FAIR"
"""QUEUE_OPTIONS[q]["FAIR"]: True serves the queue round-robin across its tasks' fair_key (store/scripts/lib/fair.lua)."""
PARTITIONS = "PARTITIONS"
"""QUEUE_OPTIONS[q]["PARTITIONS"]: the physical queues (hash tags) one logical queue is spread over (core/partitions.py)."""
ERROR_REPORTING = ("attempt", "dead", "off")
"""OPTIONS["ERROR_REPORTING"]: a task's exception is reported once per failed attempt, once per dead letter, or not (worker/running/reporting.py)."""
DEFAULT_URL = "redis://127.0.0.1:6379/0"
MIN_HEARTBEAT_BUDGET = 0.1
"""Seconds, at least, a heartbeat's round trip may take (see connection.heartbeat_budget)."""


@dataclass(frozen=True)
class Options:
    """Resolved options of one task backend alias. Durations are in seconds."""

    alias: str = "default"
    queues: tuple[str, ...] = ("default",)
    redis_url: str | None = None
    cache_alias: str | None = None
    embedded: bool = False
    embedded_path: str = ""
    cluster: bool = False  # CLUSTER: REDIS_URL / CACHE_ALIAS names a node of a Redis Cluster (connection/topology.py)
    sentinels: tuple[tuple[str, int], ...] = ()  # SENTINELS: where the sentinels are; they say where the master is
    sentinel_master: str = ""  # SENTINEL_MASTER: the name they monitor it by
    sentinel_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)  # SENTINEL_KWARGS: how to reach the sentinels
    key_prefix: str = DEFAULT_PREFIX
    max_retries: int = 3
    backoff_base: float = 1.0
    backoff_max: float = 300.0
    result_ttl: float = 86400.0
    idempotency_ttl: float = 86400.0
    dead_letter_ttl: float = 7 * 86400.0
    dead_letter_max: int = 100_000
    result_max_bytes: int = 1024 * 1024  # an encoded return value larger than this is not stored (worker/running/runner.py)
    metadata_max_bytes: int = 64 * 1024  # a task's metadata as JSON, at enqueue and at each save (core/metadata.py)
    timeout: float = 1800.0  # a task's time limit on a worker (worker/running/timelimit.py); 0 = none
    worker_concurrency: int = 0  # a queue's tasks one worker runs at once (its held budget too); 0 = no cap
    heartbeat_interval: float = 2.0
    worker_timeout: float = 10.0
    prefetch: int = 0  # 0 = the worker's concurrency
    hand_back_after: float = 0.25  # a fetched task not started within this goes back to its queue (worker/fetching/handback.py)
    max_message_bytes: int = 512 * 1024
    shutdown_grace: float = 30.0
    max_running: int = 0  # QUEUE_OPTIONS[q]["MAX_RUNNING"]: tasks of the queue running at once, fleet-wide; 0 = no limit
    rate_limit: str = ""  # QUEUE_OPTIONS[q]["RATE_LIMIT"]: "10/s"; '' = no limit
    fair: bool = False  # QUEUE_OPTIONS[q]["FAIR"]: served round-robin across the tasks' fair_key
    queue_overrides: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)
    # periodic schedules as given; checked by schedules/registry.py (system checks), a bad one is skipped by the worker
    schedules: Any = field(default=None, hash=False)
    # named worker profiles as given (runworker --profile); checked by settings/profiles.py
    workers: Any = field(default=None, hash=False)
    # events (events/subscriptions.py): SUBSCRIPTIONS and TOPICS as given, checked there
    subscriptions: Any = field(default=None, hash=False)
    topics: Any = field(default=None, hash=False)
    lifecycle_events: bool = False  # LIFECYCLE_EVENTS: publish every task's transitions to the topic redisq.tasks (events/lifecycle.py)
    durable_replicas: int = 0  # DURABLE_REPLICAS: replicas that must have an enqueue/ack/retry/bury (WAIT); 0 = off
    durable_timeout: float = 0.5  # DURABLE_TIMEOUT: seconds they may take (durable.DEFAULT_TIMEOUT)
    error_reporting: str = "attempt"  # ERROR_REPORTING: "attempt", "dead" or "off" (worker/running/reporting.py)

    def for_queue(self, queue: str) -> Options:
        """These options with the queue's ``QUEUE_OPTIONS`` applied (a partition's are its logical queue's)."""
        over = self.queue_overrides.get(queue)
        if over is None and partitions.SEP in queue:
            over = self.queue_overrides.get(partitions.logical(queue))
        if not over:
            return self
        changes = {TUNABLES[k][0]: TUNABLES[k][1](v) for k, v in over.items() if k in TUNABLES}
        changes.update({QUEUE_LIMITS[k]: v for k, v in over.items() if k in QUEUE_LIMITS})
        if FAIR in over:
            changes["fair"] = over[FAIR] is True
        return replace(self, **changes)

    def partitions(self, queue: str) -> int:
        """How many partitions logical ``queue`` has (1: not partitioned, today's layout)."""
        over = self.queue_overrides.get(queue)
        return int(over.get(PARTITIONS, 1)) if over else 1

    def physical(self, queue: str) -> list[str]:
        """The physical queues of logical ``queue``: ``[queue]`` unless it is partitioned (core/partitions.py)."""
        over = self.queue_overrides.get(queue)
        if not over or over.get(PARTITIONS, 1) == 1:
            return [queue]
        return partitions.physical(queue, int(over[PARTITIONS]))

    def physical_all(self, queues: Iterable[str]) -> list[str]:
        """Every physical queue of the logical ``queues``, in their order."""
        return [p for q in queues for p in self.physical(q)]
