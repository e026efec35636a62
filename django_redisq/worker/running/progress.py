"""The worker's side of ``report_progress``: one writer per running attempt, at most one write per interval.

``Runner`` puts a ``ProgressWriter`` in ``django_redisq.progress.current`` while
it calls a task (on the task's thread, its event loop, or in a process-pool
child), and flushes it when the call ends, however it ended. A report within
``INTERVAL`` of the last stored one is held back (each newer one replaces it),
unless it says the work is done; the one held back at the end is stored then.
So a task reporting in a tight loop costs Redis about two writes a second, and
the last report is never lost.

Progress is a display: a write that fails (Redis unreachable for a moment) is
logged and dropped, never the task's failure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django_redisq.exceptions import RedisError
from django_redisq.progress import INTERVAL, encode

logger = logging.getLogger("django_redisq")


class ProgressWriter:
    """The reports of one attempt of one task; safe to call from the task's own threads."""

    def __init__(self, save: Callable[[str], bool], attempt: int, interval: float = INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``save``: stores one encoded report (``Broker.save_progress`` bound to the task); ``attempt``: its number."""
        self._save, self.attempt, self.interval, self._clock = save, attempt, interval, clock
        self._lock = threading.Lock()
        self._last: float | None = None  # when the last report was written
        self._pending: tuple[float, float, str] | None = None  # the newest report held back
        self.writes = 0

    def report(self, done: float, total: float, message: str) -> None:
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self.interval and done < total:
                self._pending = (done, total, message)  # encoded only if it is still the newest at the end
                return
            self._last, self._pending = now, None
        self._write(encode(done, total, message, self.attempt))

    def flush(self) -> None:
        """Store the report held back, if any (the end of the attempt)."""
        with self._lock:
            held, self._pending = self._pending, None
        if held is not None:
            self._write(encode(*held, self.attempt))

    def _write(self, text: str) -> None:
        try:
            self._save(text)
            self.writes += 1
        except RedisError as exc:
            logger.warning("a progress report was not stored (%s); the task goes on", exc)
