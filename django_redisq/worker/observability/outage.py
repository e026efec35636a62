"""Redis out of reach, said once: one line per part of the worker when an outage starts, one when Redis is back.

The parts of a worker that talk to Redis (the heartbeat and its sweep, the
fetchers, the upkeep and its reaping and presence poll, the event pump, the
settle steps) retry on their own schedules, and each used to log every failed
try: about six WARNING lines a second through an outage, and nothing when it
ended. (The pause watch and the running marks already said a failure streak
once, each on its own.) ``Outage`` is shared by those parts of one worker
(worker/parts.py): the first failure of
each part during an outage is a WARNING with its cause; its later ones are
DEBUG; the first round trip that succeeds after it logs how long Redis was gone
and which parts had failed. A failure Redis can never answer differently (a
script error, WRONGTYPE) is not an outage: it is logged every time, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django_redisq.store.server import is_transient

logger = logging.getLogger("django_redisq")


class Outage:
    """One worker's account of Redis being out of reach (thread-safe; ``answered`` costs one read when all is well)."""

    def __init__(self, worker_id: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.worker_id, self.clock = worker_id, clock
        self.since: float | None = None
        """When the current outage began (``clock``), None while Redis answers."""
        self._told: dict[str, int] = {}  # part -> its failures in this outage
        self._lock = threading.Lock()

    def failed(self, part: str, exc: BaseException, message: str, *args: Any) -> None:
        """A round trip of ``part`` failed: ``message % args`` at WARNING once per part and outage, at DEBUG after."""
        if not is_transient(exc):
            logger.warning(message, *args)
            return
        with self._lock:
            if self.since is None:
                self.since = self.clock()
            first = part not in self._told
            self._told[part] = self._told.get(part, 0) + 1
        if first:
            logger.warning(message + " (said once until Redis answers again)", *args)
        else:
            logger.debug(message, *args)

    def answered(self) -> None:
        """A round trip succeeded: if an outage was under way, say it ended, how long it lasted and what failed."""
        if self.since is None:
            return
        with self._lock:
            since, told = self.since, self._told
            self.since, self._told = None, {}
        if since is None:  # another part said it first
            return
        parts = ", ".join(f"{part} {n}x" for part, n in told.items())
        logger.warning("worker %s reaches Redis again after %.1f s; failed meanwhile: %s", self.worker_id,
                       self.clock() - since, parts)
