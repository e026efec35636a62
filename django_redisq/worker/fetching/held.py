"""What a worker holds: the tasks it has fetched and not yet settled, and which of them run.

One object shared by the worker's components, each using its own verbs:
the fetcher ``add``s what fetch.lua claimed, executors take the ``next`` one
(or ``take`` one of a queue they picked) and ``begin`` it, the settler
``forget``s what it settled, the heartbeat asks what is ``known`` (for its
sweep) and ``drop``s a queue's unstarted tasks when the worker finds it was
reaped (the fence); the pause watch ``block``s a paused queue and takes its
unstarted tasks back (``take_unstarted``). A per-queue ``Budget`` bounds how
much is held (the prefetch, and a queue's ``WORKER_CONCURRENCY``).

No hoarding: with ``slots`` (the worker's concurrency) the fetch is bounded
across queues too. ``room`` is what may be fetched now: nothing while every
slot is busy, else the free slots plus ``ahead()`` (the prefetch beyond the
slots, kept only while it starts soon) less what is held unstarted or being
fetched. What waits unstarted longer than a short bound anyway (every slot
took a long task) is taken back by ``take_stale`` for the hand-back
(worker/fetching/handback.py), so another worker with a free slot runs it.

Three states of a held task: waiting (fetched, not started), executing
(``begin`` to ``finished``: the pool runs it, never more than ``slots``), and
run but not yet settled (between ``finished`` and ``forget``).

Tasks waiting to start sit in one deque per queue; ``next`` serves them in
the worker's queue order (worker/fetching/queue_order.py): strict, the first queue with one, or
weighted among the queues with one. A blocked (paused) queue is skipped.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from django_redisq.store.steps.replies import CORRUPT, NOMSG, RUN, Delivery
from django_redisq.worker.fetching.queue_order import QueueOrder


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


def _capped(limit: Callable[[], int], cap: int) -> Callable[[], int]:
    return lambda: min(limit(), cap)


class Held:
    """Fetched, unsettled tasks of one worker; thread-safe."""

    def __init__(self, queues: Sequence[str], limit: Callable[[], int], order: QueueOrder | None = None,
                 caps: dict[str, int] | None = None, slots: int | None = None, ahead: Callable[[], int] | None = None) -> None:
        """``slots``: tasks the worker runs at once (None: no bound across queues, the budgets alone);
        ``ahead``: how many it may hold unstarted beyond its free slots (default none)."""
        self.lock = threading.Lock()
        self._changed = threading.Condition(self.lock)  # a slot freed, or a task started or left
        self.inflight: dict[str, Delivery] = {}
        self.running: set[str] = set()  # begun and not settled
        self.executing: set[str] = set()  # begun and not finished: at most ``slots``
        self.since: dict[str, float] = {}  # id -> when fetched (monotonic), while it waits unstarted
        self.slots, self.ahead = slots, ahead or (lambda: 0)
        self.fetching = 0  # room taken by fetches under way
        self.order = order or QueueOrder(queues)
        caps = caps or {}
        # a capped queue (WORKER_CONCURRENCY) holds at most its cap: running <= held <= cap, and nothing of
        # it waits in this worker's memory while the cap is reached (another worker may run it)
        self.permits = {q: Budget(limit if q not in caps else _capped(limit, caps[q])) for q in queues}
        self._ready: dict[str, deque[Delivery]] = {q: deque() for q in queues}
        self._cond = threading.Condition(threading.Lock())
        self.blocked: frozenset[str] = frozenset()  # paused queues: their tasks do not start
        # per queue, how often the worker found it had been reaped there (``drop``): a fetch sent before the
        # latest of those may have claimed tasks the reaper has since given to another worker (``add``)
        self.fences: dict[str, int] = dict.fromkeys(queues, 0)

    def add(self, q: str, taken: int, got: Iterable[Delivery], fence: int | None = None) -> int:
        """Hold what a fetch returned for executors to run; give back the permits not used.

        ``fence``: ``fences[q]`` read before the fetch was sent. If the worker has found since that it was
        reaped on ``q``, nothing is held: a fetch sent before a freeze and answered before the reap claimed
        tasks the reaper gave back and another worker runs (seen: 7 run twice). One answered after the worker
        registered again holds ids of its processing list that it does not know: the heartbeat's sweep hands
        those back (worker/background/heartbeat.py).
        """
        kept = [d for d in got if d.code in (RUN, NOMSG, CORRUPT)]
        if kept:
            now = time.monotonic()
            with self.lock:
                if fence is not None and self.fences[q] != fence:
                    kept = []
                for d in kept:
                    self.inflight[d.id] = d
                    self.since[d.id] = now
            with self._cond:
                self._ready[q].extend(kept)
                self._cond.notify(len(kept))
        self.permits[q].give(taken - len(kept))
        return len(kept)

    def put_back(self, d: Delivery) -> None:
        with self._cond:
            self._ready[d.queue].append(d)
            self._cond.notify()

    def next(self, timeout: float | None = None) -> Delivery | None:
        """The next task to run in the queue order, waiting up to ``timeout``; None if none."""
        with self._cond:
            d = self._pop()
            if d is not None or not timeout:
                return d
            deadline = time.monotonic() + timeout
            while (d := self._pop()) is None:
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    return self._pop()
            return d

    def _pop(self) -> Delivery | None:
        ready, blocked = self._ready, self.blocked
        if not self.order.weighted:
            for q in self.order.ranked():
                dq = ready[q]
                if dq and not (blocked and q in blocked):
                    return dq.popleft()
            return None
        have = [q for q in self.order.queues if ready[q] and q not in blocked]
        return ready[self.order.pick(have)].popleft() if have else None

    def take(self, q: str) -> Delivery | None:
        """The next task of queue ``q`` (one an executor picked), or None if none waits or ``q`` is blocked."""
        with self._cond:
            dq = self._ready[q]
            return dq.popleft() if dq and q not in self.blocked else None

    def ready(self, q: str) -> bool:
        """Whether a task of ``q`` waits to start (unlocked read: a hint)."""
        return bool(self._ready[q])

    def block(self, q: str, blocked: bool = True) -> None:
        """Start no task of ``q`` (its queue is paused) until unblocked."""
        with self._cond:
            self.blocked = self.blocked | {q} if blocked else self.blocked - {q}
            self._cond.notify_all()

    def take_unstarted(self, q: str) -> list[str]:
        """Forget every task of ``q`` not started (to hand back), oldest first; their permits go back."""
        with self._cond:
            waiting, self._ready[q] = self._ready[q], deque()
        out = []
        with self.lock:
            for d in waiting:
                if self.inflight.get(d.id) is d:
                    del self.inflight[d.id]
                    out.append(d.id)
            # one an executor took but has not begun: begin() now finds it gone
            for task_id, d in list(self.inflight.items()):
                if d.queue == q and task_id not in self.running:
                    del self.inflight[task_id]
                    out.append(task_id)
            for task_id in out:
                self.since.pop(task_id, None)
            self._changed.notify_all()
        self.permits[q].give(len(out))
        return out

    def take_stale(self, older_than: float, claims: dict[str, int] | None = None) -> dict[str, list[str]]:
        """Forget every waiting task fetched more than ``older_than`` seconds ago (to hand back), by queue,
        oldest first; their permits go back. Only tasks in the queues' deques: none an executor took."""
        cutoff = time.monotonic() - older_than
        since = self.since
        stale: list[Delivery] = []
        with self._cond:
            for q, dq in self._ready.items():
                if dq and any(since.get(d.id, cutoff) < cutoff for d in dq):
                    keep: deque[Delivery] = deque()
                    for d in dq:
                        (stale if since.get(d.id, cutoff) < cutoff else keep).append(d)
                    self._ready[q] = keep
        out: dict[str, list[str]] = {}
        if not stale:
            return out
        with self.lock:
            for d in sorted(stale, key=lambda d: since.get(d.id, 0.0)):
                if self.inflight.get(d.id) is d:
                    del self.inflight[d.id]
                    since.pop(d.id, None)
                    out.setdefault(d.queue, []).append(d.id)
                    if claims is not None:  # the delivery count of each claim: release.lua undoes only that claim
                        claims[d.id] = d.deliveries
            self._changed.notify_all()
        for q, ids in out.items():
            self.permits[q].give(len(ids))
        return out

    # -- room: no hoarding -------------------------------------------------

    def free_slots(self) -> int:
        """Slots not running a task (unlocked read: a hint); a large number without ``slots``."""
        return 1 << 30 if self.slots is None else self.slots - len(self.executing)

    def reserve(self, want: int) -> int:
        """Take room to fetch up to ``want`` tasks now (see the module docstring); ``unreserve`` it after the fetch."""
        if self.slots is None or want <= 0:
            return max(0, want)
        with self.lock:
            free = self.slots - len(self.executing)
            if free <= 0:
                return 0
            waiting = len(self.inflight) - len(self.running) + self.fetching
            k = max(0, min(want, free + self.ahead() - waiting))
            self.fetching += k
            return k

    def unreserve(self, k: int) -> None:
        """A fetch that took room ``k`` is over (what it got is held by now)."""
        if k and self.slots is not None:
            with self.lock:
                self.fetching -= k
                self._changed.notify_all()

    def wait_for_room(self, timeout: float) -> bool:
        """Wait up to ``timeout`` until a slot is free and fewer tasks wait unstarted than the free slots (plus
        ``ahead``); whether there is room. A fetcher blocks here, not in BLMOVE, while this worker is busy."""
        if self.slots is None:
            return True
        slots = self.slots

        def room() -> bool:
            free = slots - len(self.executing)
            return free > 0 and len(self.inflight) - len(self.running) + self.fetching < free + self.ahead()

        with self._changed:
            return self._changed.wait_for(room, timeout)

    def begin(self, d: Delivery, may_start: Callable[[], bool]) -> bool | None:
        """Mark ``d`` running: True; False if a fence dropped it; None if ``may_start()`` says not now."""
        with self.lock:
            if self.inflight.get(d.id) is not d:
                return False
            if not may_start():
                return None
            self.running.add(d.id)
            self.executing.add(d.id)
            self.since.pop(d.id, None)
            return True

    def finished(self, d: Delivery) -> None:
        """``d`` has run (its outcome is known, not yet settled): its slot is free."""
        with self.lock:
            self.executing.discard(d.id)
            self._changed.notify_all()

    def forget(self, settled: Iterable[Delivery]) -> None:
        """Settled tasks are no longer held; their permits go back."""
        settled = list(settled)
        with self.lock:
            for d in settled:
                if self.inflight.get(d.id) is d:
                    del self.inflight[d.id]
                self.running.discard(d.id)
                self.executing.discard(d.id)
                self.since.pop(d.id, None)
            self._changed.notify_all()
        for d in settled:
            self.permits[d.queue].give(1)

    def drop(self, q: str) -> int:
        """The worker was reaped on ``q``: forget its unstarted tasks there (they are pending again)."""
        with self.lock:
            self.fences[q] += 1  # first: a fetch under way is not held once answered (``add``)
        return len(self.take_unstarted(q))

    def unstarted(self) -> dict[str, list[str]]:
        """Take every task not yet started, by queue (a stopping worker hands them back)."""
        out: dict[str, list[str]] = {}
        with self._cond:
            waiting = [d for dq in self._ready.values() for d in dq]
            for dq in self._ready.values():
                dq.clear()
        with self.lock:
            for d in waiting:
                if self.inflight.pop(d.id, None) is d:
                    self.since.pop(d.id, None)
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

    def executing_by_queue(self) -> dict[str, list[str]]:
        """The ids of the tasks executing now (begun, not finished), by queue: at most ``slots`` in all."""
        out: dict[str, list[str]] = {}
        with self.lock:
            for task_id in self.executing:
                d = self.inflight.get(task_id)
                if d is not None:
                    out.setdefault(d.queue, []).append(task_id)
        return out

    def executing_deliveries(self) -> list[Delivery]:
        """The tasks executing now (begun, not finished), oldest id first: what a stop waits for."""
        with self.lock:
            return sorted((d for task_id in self.executing if (d := self.inflight.get(task_id)) is not None),
                          key=lambda d: d.id)

    def executing_count(self) -> int:
        """Tasks begun and not finished (unlocked read)."""
        return len(self.executing)

    def waiting(self) -> int:
        """Tasks held and not started (unlocked read)."""
        return max(0, len(self.inflight) - len(self.running))

    def current(self, limit: int = 50) -> list[str]:
        """The ids executing now (at most ``limit``)."""
        with self.lock:
            return sorted(self.executing)[:limit]

    def __len__(self) -> int:
        return len(self.inflight)
