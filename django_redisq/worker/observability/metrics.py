"""Per-worker Prometheus metrics, served by ``runworker --metrics-port PORT``.

What only a worker process knows (the fleet-wide figures that live in Redis
are served by ``django_redisq.views.metrics`` instead): how long each task
type runs, what became of each attempt, how long tasks waited, how busy the
executors are, lease losses and Redis reconnects. Each worker process has its
own registry and HTTP endpoint; Prometheus adds the ``instance`` label, so no
worker id goes into the labels (worker ids change on every restart).

Every label value comes from a bounded set: ``queue`` is one the worker serves,
``task`` the dotted path of a registered task (``django_redisq.task.get_registered``)
or ``"(unregistered)"`` for all the others together (``UNREGISTERED``), so
messages naming made-up task paths cannot grow the scrape or the worker's memory.
The endpoint (``worker/observability/metrics_server.py``) shows task and queue names and the
worker id; it listens on loopback unless ``runworker --metrics-host`` says
otherwise, and ``--metrics-token-file`` requires a bearer token.

The hot path pays a dictionary lookup and two observations per settled task,
nothing when the endpoint is off. Needs ``prometheus-client``
(``pip install django-redisq[metrics]``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django_redisq.compat import prometheus
from django_redisq.task import get_registered
from django_redisq.worker.observability.metrics_server import MetricsServer

if TYPE_CHECKING:
    from django_redisq.worker.settling.settler import Batch

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
OUTCOMES = {"success": "success", "retry": "retry", "dead": "dead_lettered"}
UNREGISTERED = "(unregistered)"
"""The ``task`` label of every attempt whose message names no registered task (dead-lettered ``unknown_task``,
or a message that could not be read): a message's task path is anyone's input, so it never becomes a label value."""


class WorkerMetrics:
    """The metrics of one worker process, in a registry of its own."""

    def __init__(self, info: dict[str, str], busy: Callable[[], float], since_beat: Callable[[], float], concurrency: int,
                 held: Callable[[], float] = lambda: 0) -> None:
        pc = prometheus()
        self.registry = reg = pc.CollectorRegistry()
        self.duration = pc.Histogram("redisq_worker_task_duration_seconds", "Run time of a task attempt, settled by this worker.",
                                     ["queue", "task"], buckets=DURATION_BUCKETS, registry=reg)
        self.tasks = pc.Counter("redisq_worker_tasks", "Task attempts this worker settled, by outcome (success, retry, dead_lettered).",
                                ["queue", "task", "outcome"], registry=reg)
        self.wait = pc.Histogram("redisq_worker_queue_wait_seconds",
                                 "First attempts: from enqueue to the fetch that started the task (Redis clock; a run_after delay included).",
                                 ["queue"], buckets=WAIT_BUCKETS, registry=reg)
        self.lease_losses = pc.Counter("redisq_worker_lease_losses", "Settle steps that found the task taken from this worker (reaped).",
                                       registry=reg)
        self.reconnects = pc.Counter("redisq_worker_redis_reconnects",
                                     "Heartbeats that reached Redis again after one or more failed.", registry=reg)
        pc.Gauge("redisq_worker_executors_busy", "Executors (threads, child processes, asyncio slots) running a task now.",
                 registry=reg).set_function(busy)
        pc.Gauge("redisq_worker_executors", "Executors of this worker (--concurrency).", registry=reg).set(concurrency)
        pc.Gauge("redisq_worker_held_tasks", "Tasks this worker fetched and has not started (prefetched; not running).",
                 registry=reg).set_function(held)
        pc.Gauge("redisq_worker_heartbeat_age_seconds", "Seconds since the last heartbeat Redis answered.",
                 registry=reg).set_function(since_beat)
        pc.Info("redisq_worker", "This worker process.", registry=reg).info(info)
        pc.ProcessCollector(registry=reg)  # the standard process_* figures: CPU seconds, resident memory, open files
        self._children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self._waits: dict[str, Any] = {}
        self._failing = False
        self.server: MetricsServer | None = None

    def serve(self, host: str, port: int, token: str | None = None) -> int:
        """Serve ``/metrics`` on a daemon thread (``worker/observability/metrics_server.py``); returns the port (useful with 0,
        any free one). With ``token``, only to requests with ``Authorization: Bearer <token>``."""
        generate = prometheus().generate_latest
        self.server = MetricsServer(host, port, lambda: generate(self.registry), token)
        return self.server.port

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def settled(self, batch: Batch) -> None:
        for d, o in batch:
            name = o.task_name or d.task
            if not name or get_registered(name) is None:  # a path read from Redis names no series of its own
                name = UNREGISTERED
            key = (d.queue, name, o.kind)
            pair = self._children.get(key)
            if pair is None:
                pair = self._children[key] = (self.duration.labels(d.queue, name), self.tasks.labels(d.queue, name, OUTCOMES.get(o.kind, o.kind)))
            pair[0].observe(o.duration)
            pair[1].inc()
            if d.deliveries == 1 and d.enqueued_at and d.started_at >= d.enqueued_at:
                wait = self._waits.get(d.queue)
                if wait is None:
                    wait = self._waits[d.queue] = self.wait.labels(d.queue)
                wait.observe((d.started_at - d.enqueued_at) / 1000)

    def beat(self, ok: bool) -> None:
        if ok and self._failing:
            self.reconnects.inc()
        self._failing = not ok


def worker_info(worker_id: str, pool: str, queues: Sequence[str]) -> dict[str, str]:
    return {"worker": worker_id, "pool": pool, "queues": ",".join(queues)}
