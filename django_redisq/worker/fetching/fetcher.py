"""Fetching: keep each queue's budget of tasks fetched, without polling.

Under a backlog the executors fetch for themselves (``fetch_now``: no thread
hand-off between fetching and running). Once a queue runs dry, its fetcher
thread blocks in BLMOVE, so a new task on any queue starts at once, and
claims it with fetch.lua. A fetch that finds the worker fenced (reaped) wakes
the heartbeat, which drops what the worker held and registers it again. A
fetch that finds its queue paused tells the pause watch (worker/fetching/pausing.py); while a
queue is paused nobody fetches from it or blocks in BLMOVE on it (the watch
reads its state every quarter second), and nothing is logged per attempt.

No hoarding (worker/fetching/held.py): a fetch takes at most the worker's room, so
a worker whose every slot is busy fetches nothing, and its idle queues'
threads wait for a free slot instead of blocking in BLMOVE, where they would
take a new task from under an idle worker's nose.

In weighted order (worker/fetching/queue_order.py) an executor picks the queue first, by weight
among the queues that have work (``take_weighted``), then takes that queue's
next held task, fetching for it if none is held; in strict order it takes the
next held task and fetches only when none is held (``fetch_now``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from django_redisq.exceptions import Fenced, QueuePaused, RedisError
from django_redisq.store.broker import Broker
from django_redisq.store.server import BLOCK_TIMEOUT
from django_redisq.store.steps.replies import Delivery
from django_redisq.worker.fetching.held import Held
from django_redisq.worker.fetching.queue_order import QueueOrder
from django_redisq.worker.observability.outage import Outage

logger = logging.getLogger("django_redisq")


class Idle(dict[str, threading.Event]):
    """Per queue, an event set when the queue looked dry (or was resumed): then its fetcher thread fetches."""

    @classmethod
    def of(cls, queues: Sequence[str]) -> Idle:
        """Every queue idle: each thread looks once at the start."""
        idle = cls((q, threading.Event()) for q in queues)
        for event in idle.values():
            event.set()
        return idle

    def wake(self, q: str) -> None:
        """``q`` may have work again (the pause watch saw it resumed)."""
        self[q].set()


class Fetcher:
    def __init__(
        self, *, broker: Broker, worker_id: str, queues: Sequence[str], held: Held, stop: threading.Event,
        on_fenced: Callable[[], None], idle: dict[str, threading.Event], paused: Callable[[], frozenset[str]],
        saw_paused: Callable[[str], None], burst: bool = False, outage: Outage | None = None,
    ) -> None:
        """``idle``: per queue, set when the queue looked dry (its thread fetches; the pause watch sets it on resume);
        ``paused``/``saw_paused``: the pause watch's view of the paused queues and what to tell it (worker/fetching/pausing.py)."""
        self.broker, self.worker_id, self.queues, self.held = broker, worker_id, list(queues), held
        self.stop, self.on_fenced, self.burst = stop, on_fenced, burst
        self.idle = idle
        self.order: QueueOrder = held.order
        self.paused, self.saw_paused = paused, saw_paused
        self.outage = outage or Outage(worker_id)  # the worker's account of Redis out of reach (one line a part)

    def loop(self, q: str) -> None:
        """Per queue: keep up to the budget fetched, blocking in BLMOVE while idle."""
        permits, pause, idle = self.held.permits[q], 0.1, self.idle[q]
        while not self.stop.is_set():
            if not idle.wait(0.2) or self.stop.is_set():  # under a backlog the executors fetch for themselves
                continue
            if q in self.paused():  # no fetch, no BLMOVE: the pause watch unblocks us on resume
                self.stop.wait(0.05)
                continue
            if not self.held.wait_for_room(0.2):  # every slot busy: leave new tasks to a worker with a free one
                continue
            n = permits.take(timeout=0.2)
            if n == 0:
                continue
            room = 0
            fence = self.held.fences[q]  # before the fetch is sent: see Held.add
            try:
                room = self.held.reserve(n)
                got = self.broker.fetch(q, self.worker_id, room) if room else []
                if not got:
                    self.held.unreserve(room)
                    room = 0
                    moved = self.broker.wait(q, self.worker_id, 0.05 if self.burst else BLOCK_TIMEOUT)
                    if moved:  # the one a BLMOVE took, and what room there is now beside it
                        room = self.held.reserve(n - 1)
                        got = self.broker.fetch(q, self.worker_id, room, moved_id=moved)
                if got:
                    idle.clear()
                pause = 0.1
                self.outage.answered()
            except Fenced:  # reaped: the heartbeat drops what we hold and registers us again
                self.held.unreserve(room)
                permits.give(n)
                self.on_fenced()
                self.stop.wait(0.05)
                continue
            except QueuePaused:  # the id a BLMOVE moved went back; the watch hands back what we hold
                self.held.unreserve(room)
                permits.give(n)
                self.saw_paused(q)
                continue
            except Exception as exc:  # the fetcher must outlive any reply it cannot read
                self.held.unreserve(room)
                permits.give(n)
                if isinstance(exc, RedisError):
                    self.outage.failed("fetch", exc, "fetch from queue %s failed (%s); retrying in %.1fs", q, exc, pause)
                else:
                    logger.exception("fetch from queue %s failed; retrying in %.1fs", q, pause)
                self.stop.wait(pause)
                pause = min(pause * 2, 5.0)
                continue
            self.held.add(q, n, got, fence)
            self.held.unreserve(room)

    def wake(self) -> None:
        """The worker stops: every queue's thread leaves its idle wait now (and sees ``stop``), not up to 0.2 s later
        (a ``--burst`` or ``--max-tasks`` run exits that much sooner)."""
        for event in self.idle.values():
            event.set()

    def fetch_now(self) -> bool:
        """An idle executor fetches for itself (queues in the queue order); whether it got anything."""
        paused = self.paused()
        for q in self.order.ranked():
            if paused and q in paused:
                continue
            if self._fetch(q):
                return True
        return False

    def _fetch(self, q: str) -> bool:
        """Fetch up to ``q``'s free budget into the held buffer now; whether anything came."""
        n = self.held.permits[q].take(timeout=0)
        if n == 0:
            return False
        room = self.held.reserve(n)
        if room == 0:  # what this worker holds unstarted fills its free slots (or is being fetched)
            self.held.permits[q].give(n)
            return False
        fence = self.held.fences[q]  # before the fetch is sent: see Held.add
        try:
            got = self.broker.fetch(q, self.worker_id, room)
        except Exception as exc:  # noqa: BLE001 - the fetcher thread reports and backs off
            self.held.unreserve(room)
            self.held.permits[q].give(n)
            self.idle[q].set()
            if isinstance(exc, Fenced):
                self.on_fenced()
            elif isinstance(exc, QueuePaused):
                self.saw_paused(q)
            return False
        kept = self.held.add(q, n, got, fence)
        self.held.unreserve(room)
        if kept:
            return True
        self.idle[q].set()  # dry: the fetcher thread waits for the next task
        return False

    def take_weighted(self, settle: Callable[[], None]) -> Delivery | None:
        """Weighted order: pick a queue by weight among those with work, and take its next task.

        A queue has work for this executor if a task of it is held, or it is
        under a backlog (its fetcher is not waiting in BLMOVE) and has budget
        left: then the executor fetches for it. A picked queue whose budget is
        all taken by tasks run but not yet settled gets this executor's own
        settled first; if that frees nothing, the pick goes to another queue.
        """
        paused, skip = self.paused(), set()
        held, idle = self.held, self.idle
        while True:
            have = [q for q in self.queues if q not in skip and not (paused and q in paused)
                    and (held.ready(q) or not idle[q].is_set())]
            if not have:
                return None
            q = self.order.pick(have)
            d = held.take(q)
            if d is not None:
                return d
            if held.permits[q].held >= held.permits[q].limit():
                settle()
            if self._fetch(q) and (d := held.take(q)) is not None:
                return d
            skip.add(q)
