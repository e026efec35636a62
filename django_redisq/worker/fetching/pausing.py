"""A worker's view of paused queues: start nothing from one within a second, resume within a second.

A queue is paused while its key ``P:paused`` exists (``redisq queue pause``,
the admin; store/scripts/pause.lua). fetch.lua then takes nothing (``QueuePaused``),
which stops new fetches at once; but a worker may hold fetched tasks it has
not started (the prefetch), and an idle queue's fetcher sits in BLMOVE. So
this component reads every served queue's pause key, in one pipelined round
trip every ``CHECK_EVERY`` seconds (and at once when a fetch met a pause),
and on a change:

- **paused**: the queue is blocked in the held buffer (no executor starts
  its tasks), and its fetched-but-unstarted tasks are **handed back** to
  pending (release.lua: the claim undone, at the end taken next, so they
  keep their place and their delivery count). Tasks already running finish
  and are settled as usual. The fetcher no longer fetches or blocks in
  BLMOVE for it; it waits for the resume here. One INFO line.
- **resumed**: unblocked, the fetcher fetches again (one INFO line).

Handing back rather than keeping keeps a paused queue's tasks visible as
pending (the admin, ``redisq stats``), holds nothing in a worker that might
be stopped during a long pause, and loses nothing: if the release fails (Redis
away), the ids stay in the worker's processing list, unknown to it, and the
heartbeat's sweep hands them back; if the worker is killed, the reaper does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from django_redisq.exceptions import RedisError
from django_redisq.store.broker import Broker
from django_redisq.worker.fetching.handback import hand_back
from django_redisq.worker.fetching.held import Held

logger = logging.getLogger("django_redisq")

CHECK_EVERY = 0.25
"""Seconds between two reads of the pause keys: a pause or resume is seen within this (plus a round trip)."""


class Pauses:
    """Which of a worker's queues are paused; acts on each change (see the module docstring)."""

    def __init__(self, *, broker: Broker, worker_id: str, queues: Sequence[str], held: Held, stop: threading.Event,
                 on_resume: Callable[[str], None]) -> None:
        self.broker, self.worker_id, self.queues, self.held = broker, worker_id, list(queues), held
        self.stop, self.on_resume = stop, on_resume
        self.paused: frozenset[str] = frozenset()  # replaced whole (readers take no lock), changed under _lock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._failing = False
        self._announced: set[str] = set()  # paused queues whose pause was logged

    def current(self) -> frozenset[str]:
        """The queues paused now, as last seen (the fetcher's and upkeep's view)."""
        return self.paused

    def saw_paused(self, q: str) -> None:
        """A fetch found ``q`` paused: block it now, and let the watch hand back what is held."""
        self._mark(q, True)
        self._wake.set()

    def _mark(self, q: str, paused: bool) -> None:
        with self._lock:
            if (q in self.paused) != paused:
                self.paused = self.paused | {q} if paused else self.paused - {q}
                self.held.block(q, paused)

    def wake(self) -> None:
        """Look now: the worker stops (the loop then returns at once), or a fetch found a queue paused."""
        self._wake.set()

    def loop(self) -> None:
        while not self.stop.is_set():
            self._wake.wait(CHECK_EVERY)
            self._wake.clear()
            if self.stop.is_set():
                return
            try:
                self.check()
            except RedisError as exc:  # the fetchers report an outage; one line here, not one per check
                if not self._failing:
                    logger.warning("could not read the pause state of the queues (%s: %s); retrying", type(exc).__name__, exc)
                self._failing = True
            except Exception:  # the watch must outlive any reply it cannot read
                logger.exception("reading the pause state of the queues failed; retrying")

    def check(self) -> None:
        """Read the pause keys once and act on what changed."""
        states = self.broker.operator.paused_states(self.queues)
        self._failing = False
        for q in self.queues:
            state = states[q]
            if state is not None:
                first = q not in self._announced
                self._mark(q, True)
                handed = self._hand_back(q)
                if first:
                    self._announced.add(q)
                    logger.info("queue %s is paused (by %s): worker %s starts none of its tasks; %d fetched task(s) handed "
                                "back, running ones finish", q, state.partition("|")[2] or "?", self.worker_id, handed)
            elif q in self.paused or q in self._announced:
                self._mark(q, False)
                self.on_resume(q)
                if q in self._announced:
                    self._announced.discard(q)
                    logger.info("queue %s resumed: worker %s serves it again", q, self.worker_id)

    def _hand_back(self, q: str) -> int:
        ids = self.held.take_unstarted(q)
        hand_back(self.broker, self.worker_id, q, ids, "paused")
        return len(ids)
