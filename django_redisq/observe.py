"""What a worker tells the world of what it does: signals, per-worker metrics, a health file.

The worker's components report here (the settler each step Redis took, the
heartbeat each beat, the reaper the tasks it gave back, the worker each
settled batch); this module turns that into ``signals.py``'s signals, and,
when ``runworker`` asked for them, ``worker_metrics.py``'s metrics and
``liveness.py``'s health file. Signals and metrics are off the hot path of a
task that succeeds: nothing is sent for an ack.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from . import signals
from .broker import Delivery, Recovered
from .liveness import HealthFile
from .outcome import RETRY, Outcome
from .settle import DEAD_LETTERED, LEASE_LOST, RETRIED, Batch
from .worker_metrics import WorkerMetrics, worker_info

if TYPE_CHECKING:
    from .worker import Worker

logger = logging.getLogger("django_redisq")


class Observer:
    """One per worker; ``metrics`` and ``health`` stay None unless asked for."""

    def __init__(self, worker: Worker) -> None:
        from .backend import RedisQueueBackend

        self.worker = worker
        self.sender = RedisQueueBackend
        self.metrics: WorkerMetrics | None = None
        self.health: HealthFile | None = None
        self.last_beat = time.monotonic()

    # -- set up by runworker ---------------------------------------------

    def serve_metrics(self, host: str, port: int) -> int:
        w = self.worker
        self.metrics = WorkerMetrics(worker_info(w.id, w.pool.name, w.queues), lambda: len(w.held.running),
                                     lambda: time.monotonic() - self.last_beat, w.concurrency)
        return self.metrics.serve(host, port)

    def write_health_file(self, path: str) -> None:
        self.health = HealthFile(path, self.worker.options.worker_timeout, self.worker.id)

    def stop(self) -> None:
        if self.metrics is not None:
            self.metrics.stop()

    # -- told by the worker's components ---------------------------------

    def settled(self, batch: Batch) -> None:
        if self.metrics is not None:
            self.metrics.settled(batch)

    def beat(self, ok: bool) -> None:
        if ok:
            self.last_beat = time.monotonic()
        if self.metrics is not None:
            self.metrics.beat(ok)
        if self.health is not None:
            self.health.beat(ok)

    def settle_event(self, event: str, d: Delivery, o: Outcome) -> None:
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
            self._send(signals.task_recovered, backend=self.worker.options.alias, queue=r.queue, task_id=r.id,
                       task_name=r.task, deliveries=r.deliveries, dead_worker=r.worker, worker=self.worker.id)

    def _common(self, d: Delivery, o: Outcome) -> dict[str, Any]:
        return {"backend": self.worker.options.alias, "queue": d.queue, "task_id": d.id, "task_name": o.task_name or d.task,
                "attempt": d.deliveries, "error": o.error, "worker": self.worker.id}

    def _send(self, signal: Any, **kwargs: Any) -> None:
        if not signal.has_listeners(self.sender):
            return
        for receiver, result in signal.send_robust(self.sender, **kwargs):
            if isinstance(result, Exception):
                logger.error("a receiver of %s (%r) failed: %r", kwargs.get("task_id"), receiver, result, exc_info=result)
