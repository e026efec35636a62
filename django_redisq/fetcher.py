"""Fetching: keep each queue's budget of tasks fetched, without polling.

Under a backlog the executors fetch for themselves (``fetch_now``: no thread
hand-off between fetching and running). Once a queue runs dry, its fetcher
thread blocks in BLMOVE, so a new task on any queue starts at once, and
claims it with fetch.lua. A fetch that finds the worker fenced (reaped) wakes
the heartbeat, which drops what the worker held and registers it again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import redis

from .broker import Broker
from .connection import BLOCK_TIMEOUT
from .exceptions import Fenced
from .holding import Held

logger = logging.getLogger("django_redisq")


class Fetcher:
    def __init__(
        self, broker: Broker, worker_id: str, queues: Sequence[str], held: Held, stop: threading.Event,
        on_fenced: Callable[[], None], burst: bool = False,
    ) -> None:
        self.broker, self.worker_id, self.queues, self.held = broker, worker_id, list(queues), held
        self.stop, self.on_fenced, self.burst = stop, on_fenced, burst
        self.idle = {q: threading.Event() for q in self.queues}  # set: the queue looked dry, its thread fetches
        for event in self.idle.values():
            event.set()

    def loop(self, q: str) -> None:
        """Per queue: keep up to the budget fetched, blocking in BLMOVE while idle."""
        permits, pause, idle = self.held.permits[q], 0.1, self.idle[q]
        while not self.stop.is_set():
            if not idle.wait(0.2):  # under a backlog the executors fetch for themselves
                continue
            n = permits.take(timeout=0.2)
            if n == 0:
                continue
            try:
                got = self.broker.fetch(q, self.worker_id, n)
                if not got:
                    moved = self.broker.wait(q, self.worker_id, 0.05 if self.burst else BLOCK_TIMEOUT)
                    if moved:
                        got = self.broker.fetch(q, self.worker_id, n - 1, moved_id=moved)
                if got:
                    idle.clear()
                pause = 0.1
            except Fenced:  # reaped: the heartbeat drops what we hold and registers us again
                permits.give(n)
                self.on_fenced()
                self.stop.wait(0.05)
                continue
            except Exception as exc:  # the fetcher must outlive any reply it cannot read
                permits.give(n)
                if isinstance(exc, redis.RedisError):
                    logger.warning("fetch from queue %s failed (%s); retrying in %.1fs", q, exc, pause)
                else:
                    logger.exception("fetch from queue %s failed; retrying in %.1fs", q, pause)
                self.stop.wait(pause)
                pause = min(pause * 2, 5.0)
                continue
            self.held.add(q, n, got)

    def fetch_now(self) -> bool:
        """An idle executor fetches for itself (queues in order); whether it got anything."""
        for q in self.queues:
            n = self.held.permits[q].take(timeout=0)
            if n == 0:
                continue
            try:
                got = self.broker.fetch(q, self.worker_id, n)
            except Exception as exc:  # noqa: BLE001 - the fetcher thread reports and backs off
                self.held.permits[q].give(n)
                self.idle[q].set()
                if isinstance(exc, Fenced):
                    self.on_fenced()
                return False
            if self.held.add(q, n, got):
                return True
            self.idle[q].set()  # dry: the fetcher thread waits for the next task
        return False
