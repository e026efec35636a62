"""What a worker tells the world of what it does: signals, per-worker metrics, a health file.

The worker's components report here (the settler, of which the observer is a
settle hook, each step Redis took and each settled batch; the heartbeat each
beat, the reaper the tasks it gave back); this module turns that into ``signals.py``'s signals, and,
when ``runworker`` asked for them, ``worker/observability/metrics.py``'s metrics and
``worker/observability/health_file.py``'s health file. Signals and metrics are off the hot path of a
task that succeeds: nothing is sent for an ack.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django_redisq import signals
from django_redisq.store.steps.replies import Delivery, Recovered
from django_redisq.worker.observability.health_file import HealthFile
from django_redisq.worker.observability.metrics import WorkerMetrics, worker_info
from django_redisq.worker.running.outcome import RETRY, Outcome
from django_redisq.worker.settling.hooks import DEAD_LETTERED, LEASE_LOST, RETRIED, Batch, SettleHook

logger = logging.getLogger("django_redisq")


class Observer(SettleHook):
    """One per worker; ``metrics`` and ``health`` stay None unless asked for."""

    def __init__(self, *, sender: type, alias: str, worker_id: str, pool: str, queues: list[str], concurrency: int,
                 worker_timeout: float, running: Callable[[], int], held: Callable[[], int] = lambda: 0) -> None:
        """``sender``: the signals' sender (the backend class); ``running``: how many tasks the worker runs now;
        ``held``: how many it holds fetched and not started."""
        self.sender, self.alias, self.worker_id, self.pool, self.queues = sender, alias, worker_id, pool, queues
        self.concurrency, self.worker_timeout, self.running, self.held = concurrency, worker_timeout, running, held
        self.metrics: WorkerMetrics | None = None
        self.health: HealthFile | None = None
        self.last_beat = time.monotonic()

    # -- set up by runworker ---------------------------------------------

    def serve_metrics(self, host: str, port: int, token: str | None = None) -> int:
        self.metrics = WorkerMetrics(worker_info(self.worker_id, self.pool, self.queues), self.running,
                                     lambda: time.monotonic() - self.last_beat, self.concurrency, self.held)
        return self.metrics.serve(host, port, token)

    def write_health_file(self, path: str) -> None:
        self.health = HealthFile(path, self.worker_timeout, self.worker_id)

    def stop(self) -> None:
        if self.metrics is not None:
            self.metrics.stop()

    # -- told by the worker's components ---------------------------------

    def after_settle(self, batch: Batch) -> None:
        """A settle hook (worker/settling/hooks.py): the batch counted in the metrics."""
        if self.metrics is not None:
            self.metrics.settled(batch)

    def beat(self, ok: bool) -> None:
        if ok:
            self.last_beat = time.monotonic()
        if self.metrics is not None:
            self.metrics.beat(ok)
        if self.health is not None:
            self.health.beat(ok)

    def after_step(self, event: str, d: Delivery, o: Outcome) -> None:
        """A settle hook: a retry or a burial becomes a signal (its receivers publish the lifecycle events), a lost
        lease a metric."""
        if event == LEASE_LOST:
            if self.metrics is not None:
                self.metrics.lease_losses.inc()
            return
        common = self._common(d, o)
        if event == RETRIED:
            self._send(signals.task_retried, delay_ms=o.delay_ms, **common)
        elif event == DEAD_LETTERED:  # a retry that Redis turned into a dead letter was cancelled while it ran
            self._send(signals.task_dead_lettered, reason="cancelled" if o.kind == RETRY else o.reason, **common)

    def recovered(self, items: list[Recovered]) -> None:
        for r in items:
            self._send(signals.task_recovered, backend=self.alias, queue=r.queue, task_id=r.id,
                       task_name=r.task, deliveries=r.deliveries, dead_worker=r.worker, worker=self.worker_id)

    def _common(self, d: Delivery, o: Outcome) -> dict[str, Any]:
        return {"backend": self.alias, "queue": d.queue, "task_id": d.id, "task_name": o.task_name or d.task,
                "attempt": d.deliveries, "error": o.error, "worker": self.worker_id}

    def _send(self, signal: Any, **kwargs: Any) -> None:
        if not signal.has_listeners(self.sender):
            return
        for receiver, result in signal.send_robust(self.sender, **kwargs):
            if isinstance(result, Exception):
                logger.error("a receiver of %s (%r) failed: %r", kwargs.get("task_id"), receiver, result, exc_info=result)
