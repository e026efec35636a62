"""Handing back: what a busy worker holds and cannot start soon goes back to the head of its queue.

A worker fetches a little ahead of its free slots (the prefetch, for
throughput), and fetches nothing while every slot is busy (worker/fetching/held.py,
worker/fetching/fetcher.py). A task it fetched may still wait: its slots were free
when it fetched, then each took a task that runs long. Every ``CHECK_EVERY``
seconds this component takes every task that has waited unstarted longer
than ``HAND_BACK_AFTER`` (0.25 s by default) and hands it back with release.lua, the step a stopping
or pausing worker uses: in one atomic step per queue the claim is undone (the
delivery count is as if never fetched: a hand-back is not a delivery) and the
task goes to the end of its queue taken next, at the front of its priority,
so another worker with a free slot (the one blocked in BLMOVE) runs it at
once, in the order it had.

If the release fails (Redis away), the ids stay in this worker's processing
list unknown to it, and the heartbeat's sweep hands them back; if the worker
is killed, the reaper does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from django_redisq.exceptions import RedisError
from django_redisq.store.broker import Broker
from django_redisq.worker.fetching.held import Held

logger = logging.getLogger("django_redisq")

CHECK_EVERY = 0.05
"""Seconds between two looks for such tasks: a task waits at most ``HAND_BACK_AFTER + CHECK_EVERY`` (plus a round trip)."""


def hand_back(broker: Broker, worker_id: str, q: str, ids: Sequence[str], why: str,
              claims: dict[str, int] | None = None) -> bool:
    """Give ``ids`` (oldest first) of queue ``q`` back to the head of the queue, keeping their order; whether it worked.

    ``claims``: each id's delivery count as its claim said. With it, an id this worker claimed again meanwhile (it
    was reaped while paused, and fetched the task anew once back) is left alone: only the stale claim is undone."""
    if not ids:
        return True
    try:  # reversed: release puts each at the end taken next, so the oldest is taken first again
        ordered = list(ids)[::-1]
        broker.release(q, worker_id, ordered, [claims[i] for i in ordered] if claims is not None else None)
    except RedisError as exc:
        logger.warning("could not hand back %d task(s) of %s queue %s (%s); the heartbeat's sweep will", len(ids), why, q, exc)
        return False
    return True


class HandBack:
    """Hands back the tasks a worker held too long unstarted (see the module docstring)."""

    def __init__(self, *, broker: Broker, worker_id: str, held: Held, stop: threading.Event, hold_at_most: float) -> None:
        """``hold_at_most``: seconds a fetched task may wait unstarted (the option ``HAND_BACK_AFTER``)."""
        self.broker, self.worker_id, self.held, self.stop = broker, worker_id, held, stop
        self.hold_at_most = hold_at_most
        self.handed = 0  # tasks handed back so far

    def loop(self) -> None:
        while not self.stop.wait(CHECK_EVERY):
            try:
                self.check()
            except Exception:  # the hand-back must outlive anything
                logger.exception("handing back tasks held too long failed; going on")

    def check(self) -> int:
        """Hand back what waited too long; how many."""
        n, claims = 0, dict[str, int]()
        for q, ids in self.held.take_stale(self.hold_at_most, claims).items():
            hand_back(self.broker, self.worker_id, q, ids, "busy worker's", claims)
            n += len(ids)
        if n:
            self.handed += n
            logger.debug("worker %s handed back %d task(s) it could not start within %.2fs", self.worker_id, n, self.hold_at_most)
        return n
