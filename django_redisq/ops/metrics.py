"""Fleet-wide Prometheus metrics, read from Redis at scrape time (``django_redisq.views.metrics``).

The figures live in Redis, kept by the scripts that change the state they
count (ack, retry, bury, reap: "count inside the same script", invariant 5 of
docs/explanation/architecture.md), so every web process serves the same numbers and a scrape costs
``Inspector.figures``: two pipelined round trips, O(queues + workers),
however many tasks wait (bench/metrics_scrape.py measures it at 1,000,000).

Per-worker runtime figures (durations, queue wait, busy executors) are not
here: they are served by each worker, ``runworker --metrics-port``
(``worker/observability/metrics.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django_redisq.compat import prometheus
from django_redisq.core.redact import redact
from django_redisq.exceptions import RedisError
from django_redisq.ops import workflows
from django_redisq.ops.inspector import Inspector, backend_aliases
from django_redisq.store.reads.records import QueueFigures

logger = logging.getLogger("django_redisq")

STATES = ("pending", "scheduled", "running", "held", "dead", "ready")
"""``running``: what workers run now (at most their slots); ``held``: in their hands and not running (fetched and not
started, or run and waiting for the ack); ``ready``: the part of pending a worker could start now (not waiting for a
``max_running`` slot or a rate limit, the queue not paused): the figure to scale workers on (docs/howto/autoscaling.md)."""
COUNTERS = (
    # metric (without _total), help, how it is computed from the scripts' counters
    ("redisq_tasks_processed", "Tasks that succeeded (acked).", ("processed",)),
    ("redisq_tasks_failed", "Task attempts that failed (raised, timed out, lost their process), retried or not.",
     ("failed", "failed_final")),
    ("redisq_tasks_retried", "Failed attempts scheduled for another attempt.", ("retried",)),
    ("redisq_tasks_dead_lettered", "Tasks moved to the dead-letter queue, for any reason.", ("dead_count",)),
    ("redisq_tasks_recovered", "Tasks handed back to pending after their worker died (reaped).", ("recovered",)),
)
MAX_BACKENDS = 32
"""The most distinct aliases one scrape may name (``?backend=``, repeatable); a TASKS setting has a few."""


def select_backends(given: Sequence[str]) -> list[str] | None:
    """The aliases a scrape names, each once, in the order given; ``None`` (every backend) when it names none.

    ``ValueError`` (one line, for a 400) when it names more than ``MAX_BACKENDS``
    or one that is not a django_redisq backend: each alias costs a round of
    Redis reads, so a repeated one is read once and an unknown one is refused
    before any is read.
    """
    if not given:
        return None
    wanted = list(dict.fromkeys(given))
    if len(wanted) > MAX_BACKENDS:
        raise ValueError(f"too many backends: at most {MAX_BACKENDS} distinct ?backend= values")
    known = set(backend_aliases())
    for alias in wanted:
        if alias not in known:
            raise ValueError(f"unknown backend {alias[:100]!r}: not a django_redisq backend in TASKS")
    return wanted


def families(figures: Sequence[QueueFigures], up: dict[str, bool]) -> Iterator[Any]:
    """The metric families of these queue figures (``up``: alias -> whether its Redis answered)."""
    prometheus()  # a clear error without the extra
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    labels = ["backend", "queue"]
    gup = GaugeMetricFamily("redisq_up", "1 if the backend's Redis answered this scrape, else 0.", labels=["backend"])
    for alias, ok in up.items():
        gup.add_metric([alias], 1.0 if ok else 0.0)
    yield gup
    tasks = GaugeMetricFamily("redisq_queue_tasks", "Tasks of a queue in each state now (running: started and not finished; "
                              "held: in a worker's hands, not running; ready: of pending, what a worker could start now).", labels=[*labels, "state"])
    latency = GaugeMetricFamily("redisq_queue_latency_seconds", "Age of the oldest pending task (0 when none waits).", labels=labels)
    workers = GaugeMetricFamily("redisq_queue_workers", "Live workers serving the queue (heartbeat within WORKER_TIMEOUT).",
                                labels=labels)
    paused = GaugeMetricFamily("redisq_queue_paused", "1 while the queue is paused (workers start none of its tasks), else 0.",
                               labels=labels)
    counters = [CounterMetricFamily(name, text, labels=labels) for name, text, _ in COUNTERS]
    limited = GaugeMetricFamily("redisq_limit_tasks", "Tasks of a fleet-wide max_running now, by limit: the queue's "
                                "(limit=\"~queue\"), a task's (its path), its busiest keys' (path#key, at most 10) and the "
                                "rest of its keys summed (limit=\"~other\", state running: their running and waiting).",
                                labels=[*labels, "limit", "state"])
    ceiling = GaugeMetricFamily("redisq_limit_max", "The max_running of each limit redisq_limit_tasks shows (0: unknown).",
                                labels=[*labels, "limit"])
    for f in figures:
        for lim in f.limits:
            name = "~other" if lim.summed else (lim.name or "~queue")
            limited.add_metric([f.alias, f.queue, name, "running"], float(lim.running))
            limited.add_metric([f.alias, f.queue, name, "waiting"], float(lim.waiting))
            if not lim.summed:
                ceiling.add_metric([f.alias, f.queue, name], float(lim.limit))
    for f in figures:
        key = [f.alias, f.queue]
        for state in STATES:
            tasks.add_metric([*key, state], float(getattr(f, state)))
        latency.add_metric(key, f.oldest_pending_age)
        workers.add_metric(key, float(f.workers))
        paused.add_metric(key, 1.0 if f.paused else 0.0)
        for family, (_, _, parts) in zip(counters, COUNTERS, strict=True):
            family.add_metric(key, float(sum(f.totals[p] for p in parts)))
    yield from (tasks, latency, workers, paused, limited, ceiling, *counters)


class FleetCollector:
    """A ``prometheus_client`` collector over the queues of the given backend aliases (default: all)."""

    def __init__(self, aliases: Iterable[str] | None = None) -> None:
        self.aliases = list(dict.fromkeys(aliases)) if aliases is not None else None  # each alias read once

    def collect(self) -> Iterator[Any]:
        figures: list[QueueFigures] = []
        up: dict[str, bool] = {}
        flows: dict[str, dict[str, int]] = {}
        for alias in self.aliases if self.aliases is not None else backend_aliases():
            try:
                figures += Inspector.for_alias(alias).figures()
                flows[alias] = workflows.totals(alias)
                up[alias] = True
            except RedisError as exc:  # a scrape says Redis is down rather than failing
                logger.warning("metrics: Redis of backend %s did not answer (%s: %s)", alias, type(exc).__name__, redact(str(exc)))
                up[alias] = False
        yield from families(figures, up)
        yield from workflows.families(flows)
        from django_redisq.ops.topics import subscription_families  # events

        yield from subscription_families([alias for alias, ok in up.items() if ok])


def exposition(aliases: Iterable[str] | None = None) -> tuple[bytes, str]:
    """The text a scrape gets, and its content type."""
    pc = prometheus()
    registry = pc.CollectorRegistry(auto_describe=False)
    registry.register(FleetCollector(aliases))
    return pc.generate_latest(registry), pc.CONTENT_TYPE_LATEST
