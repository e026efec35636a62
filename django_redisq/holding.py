"""What a worker holds: the tasks it has fetched and not yet settled, and which of them run.

One object shared by the worker's components, each using its own verbs:
the fetcher ``add``s what fetch.lua claimed, executors take the ``next`` one
and ``begin`` it, the settler ``forget``s what it settled, the heartbeat asks
what is ``known`` (for its sweep) and ``drop``s a queue's unstarted tasks when
the worker finds it was reaped (the fence). A per-queue ``Budget`` bounds how
much is held (the prefetch).
"""

from __future__ import annotations

import itertools
import queue as queue_mod
import threading
from collections.abc import Callable, Iterable, Sequence

from .broker import CORRUPT, NOMSG, RUN, Delivery


class Budget:
    """How many fetched-but-unsettled tasks a queue may hold; the limit may change as we learn."""

    def __init__(self, limit: Callable[[], int]) -> None:
        self.limit = limit
        self.held = 0
        self._cond = threading.Condition()

    def take(self, timeout: float) -> int:
        """Wait (up to ``timeout``) until below the limit, then take the whole gap."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.held < self.limit(), timeout):
                return 0
            k = self.limit() - self.held
            self.held += k
            return k

    def give(self, k: int = 1) -> None:
        if k:
            with self._cond:
                self.held -= k
                self._cond.notify_all()


class Held:
    """Fetched, unsettled tasks of one worker; thread-safe."""

    def __init__(self, queues: Sequence[str], limit: Callable[[], int]) -> None:
        self.lock = threading.Lock()
        self.inflight: dict[str, Delivery] = {}
        self.running: set[str] = set()
        self.permits = {q: Budget(limit) for q in queues}
        self.rank = {q: i for i, q in enumerate(queues)}  # earlier queues first
        self._work: queue_mod.PriorityQueue[tuple[int, int, Delivery]] = queue_mod.PriorityQueue()
        self._seq = itertools.count()

    def add(self, q: str, taken: int, got: Iterable[Delivery]) -> int:
        """Hold what a fetch returned for executors to run; give back the permits not used."""
        used = 0
        for d in got:
            if d.code in (RUN, NOMSG, CORRUPT):
                with self.lock:
                    self.inflight[d.id] = d
                self.put_back(d)
                used += 1
        self.permits[q].give(taken - used)
        return used

    def put_back(self, d: Delivery) -> None:
        self._work.put((self.rank[d.queue], next(self._seq), d))

    def next(self, timeout: float | None = None) -> Delivery | None:
        """The next task to run (most important queue first), waiting up to ``timeout``; None if none."""
        try:
            if timeout is None:
                return self._work.get_nowait()[2]
            return self._work.get(timeout=timeout)[2]
        except queue_mod.Empty:
            return None

    def begin(self, d: Delivery, may_start: Callable[[], bool]) -> bool | None:
        """Mark ``d`` running: True; False if a fence dropped it; None if ``may_start()`` says not now."""
        with self.lock:
            if self.inflight.get(d.id) is not d:
                return False
            if not may_start():
                return None
            self.running.add(d.id)
            return True

    def forget(self, settled: Iterable[Delivery]) -> None:
        """Settled tasks are no longer held; their permits go back."""
        settled = list(settled)
        with self.lock:
            for d in settled:
                if self.inflight.get(d.id) is d:
                    del self.inflight[d.id]
                self.running.discard(d.id)
        for d in settled:
            self.permits[d.queue].give(1)

    def drop(self, q: str) -> int:
        """The worker was reaped on ``q``: forget its unstarted tasks there (they are pending again)."""
        with self.lock:
            dropped = [i for i, d in self.inflight.items() if d.queue == q and i not in self.running]
            for i in dropped:
                del self.inflight[i]
        self.permits[q].give(len(dropped))
        return len(dropped)

    def unstarted(self) -> dict[str, list[str]]:
        """Take every task not yet started, by queue (a stopping worker hands them back)."""
        out: dict[str, list[str]] = {}
        while (d := self.next()) is not None:
            with self.lock:
                if self.inflight.pop(d.id, None) is d:
                    out.setdefault(d.queue, []).append(d.id)
        return out

    def known(self) -> set[str]:
        with self.lock:
            return set(self.inflight)

    def running_by_queue(self) -> dict[str, set[str]]:
        """The ids of the tasks running now, by queue."""
        out: dict[str, set[str]] = {}
        with self.lock:
            for task_id in self.running:
                out.setdefault(self.inflight[task_id].queue, set()).add(task_id)
        return out

    def current(self, limit: int = 50) -> list[str]:
        with self.lock:
            return sorted(self.running)[:limit]

    def __len__(self) -> int:
        return len(self.inflight)
