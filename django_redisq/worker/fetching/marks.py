"""Marks: tells Redis which of the tasks this worker holds are running now (store/steps/running.py).

So ``redisq stats``, the admin, the metrics and the health output show
``running`` (executing: at most the worker's concurrency) apart from ``held``
(fetched and not started, or run and waiting for the ack). Every ``EVERY``
seconds it compares what executes now with what it last wrote and writes only
a change, in one pipelined round trip for all the worker's queues; an unchanged
mark is written again after ``REFRESH`` so its TTL (``WORKER_TIMEOUT``) never
ends while the worker lives. A failed write is retried at the next look; the
counts lag meanwhile, nothing else depends on them. On stop the marks are
deleted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from django_redisq.exceptions import RedisError
from django_redisq.store.broker import Broker
from django_redisq.worker.fetching.held import Held

logger = logging.getLogger("django_redisq")

EVERY = 0.1
"""Seconds between two looks at what executes: a start or an end shows within this (plus a round trip)."""


class Marks:
    def __init__(self, *, broker: Broker, worker_id: str, queues: Sequence[str], held: Held, stop: threading.Event,
                 ttl: float, refresh: float) -> None:
        """``ttl``: how long a mark outlives its last write (WORKER_TIMEOUT); ``refresh``: rewrite an unchanged one this often."""
        self.broker, self.worker_id, self.queues, self.held, self.stop = broker, worker_id, list(queues), held, stop
        self.ttl, self.refresh = ttl, min(refresh, ttl / 2)
        self._last: dict[str, frozenset[str]] | None = None
        self._written = 0.0
        self._failing = False

    def loop(self) -> None:
        while not self.stop.wait(EVERY):
            self.write()
        self.clear()

    def write(self) -> bool:
        """Write the marks if they changed (or are due again); whether a write was made."""
        now = {q: frozenset(ids) for q, ids in self.held.executing_by_queue().items()}
        due = time.monotonic() - self._written >= self.refresh and any(now.values())
        if now == self._last and not due:
            return False
        try:
            self.broker.running.mark(self.worker_id, now, self.queues, self.ttl)
        except RedisError as exc:
            if not self._failing:
                logger.warning("could not write which tasks run (%s: %s); the counts lag until Redis answers", type(exc).__name__, exc)
            self._failing = True
            return False
        self._failing = False
        self._last, self._written = now, time.monotonic()
        return True

    def clear(self) -> None:
        """Delete this worker's marks (it stops)."""
        try:
            self.broker.running.mark(self.worker_id, {}, self.queues, self.ttl)
        except RedisError:
            pass  # they expire
