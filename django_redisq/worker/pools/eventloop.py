"""The asyncio pool: one event loop runs up to ``concurrency`` tasks at once.

For I/O-bound ``async def`` tasks: hundreds can wait on the network at once
in one thread, each awaited on the loop directly (no event loop per call).
A sync task runs on a thread of its own executor (up to ``SYNC_THREADS``), so
it never blocks the loop; Django's async-safety rules hold as in an ASGI
view: async code reaches the ORM through ``sync_to_async``.

The worker feeds it from one executor lane, which ``reserve``s room (fewer
than ``concurrency`` tasks in flight) before it takes the next task. A time limit cancels the coroutine
(``TaskTimeout``), as does a cancellation (``TaskCancelled``): the coroutine
must reach an ``await`` for either to take effect, so a coroutine that blocks
the loop in sync code stalls every task on it. That is the asyncio contract;
use the process pool for such code.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django_redisq.store.steps.replies import Delivery
from django_redisq.worker.pools.base import Done, Pool
from django_redisq.worker.running.outcome import DEAD, Outcome, error_dict

logger = logging.getLogger("django_redisq")

SYNC_THREADS = 16
"""Most sync tasks the asyncio pool runs at once (each on a thread)."""


class EventLoopPool(Pool):
    name = "asyncio"
    lanes = 1
    deferred = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._room = threading.Semaphore(self.concurrency)
        self._inflight: dict[str, asyncio.Task[Any]] = {}
        self._idle = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._sync = ThreadPoolExecutor(min(SYNC_THREADS, self.concurrency), thread_name_prefix="redisq-sync")
        self._thread = threading.Thread(target=self._run_loop, name="redisq-loop", daemon=True)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def start(self) -> None:
        self._thread.start()

    def reserve(self, timeout: float) -> bool:
        return self._room.acquire(timeout=timeout)

    def unreserve(self) -> None:
        self._room.release()

    def submit(self, lane: int, d: Delivery, done: Done) -> None:
        if not self._thread.is_alive():
            self._room.release()
            raise RuntimeError("the asyncio pool's event loop is not running")
        with self._idle:
            self._inflight[d.id] = None  # type: ignore[assignment]  # counted from now; the task is set on the loop
        self._loop.call_soon_threadsafe(self._begin, d, done)

    def _begin(self, d: Delivery, done: Done) -> None:
        t = self._loop.create_task(self._one(d, done), name=f"redisq-task-{d.id}")
        with self._idle:
            self._inflight[d.id] = t

    async def _one(self, d: Delivery, done: Done) -> None:
        try:
            try:
                outcome = await self.runner.arun(d, self.worker_id, self._sync)
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError) and self._stopping_now:
                    return  # stopped at once: the task stays in processing for the reaper
                logger.exception("running task %s failed inside the asyncio pool", d.id)
                outcome = Outcome(DEAD, error=error_dict(exc), reason="worker_error")
            done(d, outcome)  # reported before the task counts as gone: a stopping worker settles it, never hands it back
        finally:
            with self._idle:
                self._inflight.pop(d.id, None)
                self._idle.notify_all()
            self._room.release()

    _stopping_now = False

    def in_flight(self) -> int:
        return len(self._inflight)

    def wait_idle(self, deadline: float) -> bool:
        with self._idle:
            while self._inflight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(min(left, 0.1))
        return True

    def stop(self, force: bool = False) -> None:
        if force:
            self._stopping_now = True
            with self._idle:
                tasks = [t for t in self._inflight.values() if t is not None]
            for t in tasks:
                self._loop.call_soon_threadsafe(t.cancel)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._sync.shutdown(wait=not force, cancel_futures=True)
