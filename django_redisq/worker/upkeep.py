"""Upkeep: what a worker does for the fleet besides running tasks, on its main thread.

- promote: move due delayed and retried tasks from ``scheduled`` to ``pending``,
  waking when the next one is due (at most every half second);
- reap: hand back the tasks of workers silent past ``WORKER_TIMEOUT`` (every
  ``HEARTBEAT_INTERVAL``; reap.lua decides who may reap whom);
- cancel: tell the pool of running tasks someone cancelled (one look per
  queue with tasks running here, each round, so within about a second);
- in burst mode, notice when the queues are drained.

A failed round is logged and tried again; it never ends the worker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django_redisq.exceptions import RedisError
from django_redisq.store.broker import Broker
from django_redisq.worker.held import Held
from django_redisq.worker.pools import Pool

logger = logging.getLogger("django_redisq")

ROUND = 0.5
"""Seconds between upkeep rounds, at most."""


class Upkeep:
    def __init__(self, broker: Broker, worker_id: str, queues: Sequence[str], held: Held, pool: Pool,
                 stop: threading.Event, reap_every: float, burst: bool,
                 on_recovered: Callable[[Any], None] | None = None, paused: Callable[[], frozenset[str]] | None = None,
                 tick: Callable[[], None] | None = None) -> None:
        """``paused``: the pause watch's view (a burst worker does not wait for a paused queue); ``tick``: called every
        round (the task log's summary line is written even when no more tasks come)."""
        self.broker, self.worker_id, self.queues = broker, worker_id, list(queues)
        self.held, self.pool, self.stop = held, pool, stop
        self.reap_every, self.burst = reap_every, burst
        self.told: set[str] = set()  # running tasks the pool was told to cancel (until they are settled)
        self.on_recovered = on_recovered  # told what each reap handed back (the task_recovered signal)
        self.paused = paused
        self.tick: Callable[[], None] = tick or (lambda: None)

    def loop(self) -> None:
        """Rounds until stopped, or, with ``burst``, until the queues are drained."""
        quiet_rounds, last_reap = 0, 0.0
        while not self.stop.is_set():
            wait, moved = ROUND, 0
            try:
                for q in self.queues:
                    n, nxt = self.broker.promote(q)
                    moved += n
                    if nxt >= 0:
                        wait = min(wait, nxt / 1000)
                if time.monotonic() - last_reap >= self.reap_every:
                    last_reap = time.monotonic()
                    self.reap()
                self.cancel_running()
                self.tick()
                if self.burst:
                    quiet_rounds = quiet_rounds + 1 if moved == 0 and self.drained() else 0
                    if quiet_rounds >= 2:
                        return
                    wait = min(wait, 0.05)
            except RedisError as exc:
                logger.warning("worker upkeep failed (%s); retrying", exc)
                wait = 1.0
            except Exception:
                logger.exception("worker upkeep failed; retrying")
                wait = 1.0
            self.stop.wait(max(0.005, wait))

    def cancel_running(self) -> None:
        for q, ids in self.held.running_by_queue().items():
            requested = self.broker.cancel_requests(q)
            for task_id in ids & requested.keys() - self.told:
                self.told.add(task_id)
                if self.pool.cancel(task_id, requested[task_id]):
                    logger.warning("task id=%s cancelled by %s while running: stopping it", task_id, requested[task_id] or "?")

    def settled(self, ids: set[str]) -> None:
        if self.told:
            self.told -= ids

    def reap(self) -> None:
        for q in self.queues:
            try:
                tasks, workers, recovered = self.broker.reap_detail(q, self.worker_id)
            except RedisError as exc:
                logger.warning("reaping queue %s failed (%s: %s)", q, type(exc).__name__, exc)
                continue
            if self.on_recovered is not None and recovered:
                self.on_recovered(recovered)
            if workers:
                logger.warning("reaped worker(s) %s: %d task(s) of queue %s back to pending", ", ".join(workers), tasks, q)

    def drained(self) -> bool:
        """Nothing held, nothing pending (a paused queue's tasks wait for its resume, not for a burst worker)."""
        if len(self.held):
            return False
        paused = self.paused() if self.paused is not None else frozenset()
        return self.broker.nothing_left(self.queues, self.worker_id, skip_waiting=paused)
