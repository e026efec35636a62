"""What a worker logs about the tasks it settles: each failure and dead letter at once, successes summed up.

A line per successful task through a console handler costs a drain about a
fifth of its rate (bench/run.py --only drain --kinds noop,rpush --logging
console, ``runworker -v 1`` against ``-v 2``, which adds the line: a no-op
task 7,908 against 6,255/s with -c 1, 6,995 against 5,468/s with -c 2, worker
CPU 85 against 93 and 86 against 122 us per task; earlier, 5,616 and 4,133/s
against 4,056 and 3,358/s), for lines nobody reads one by one at thousands a
second. So it is opt-in, and on the ``django_redisq.tasks`` logger:

* a failed attempt (retried) and every dead-lettered task, whatever the
  reason (the task raised, or it never ran: ``unknown_task``,
  ``bad_arguments``, ``cancelled``...): one WARNING line at once with the
  task, id, reason, the error's message and a hint (``HINTS``), then the
  traceback of a task that raised;
* a success: one INFO line on the ``django_redisq.tasks.success`` logger,
  opt-in (``runworker -v 2``, or that logger named at INFO in ``LOGGING``;
  apps.py sets it to WARNING otherwise); when off it costs a counter, not a
  log record;
* every ``SUMMARY_EVERY`` seconds in which tasks were settled: one INFO line
  with the counts per outcome, the rate and the slowest task of the window;
  the last window's line is written when the worker stops.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from django_redisq.apps import SUCCESS_LOGGER
from django_redisq.worker.running.outcome import DEAD

task_log = logging.getLogger("django_redisq.tasks")
success_log = logging.getLogger(SUCCESS_LOGGER)

HINTS: dict[str, str] = {
    "failed": "out of retries; fix the cause, then `manage.py redisq dead replay <id>`",
    "not_retryable": "its exception is not retried (retry_on / no_retry_on, or its backoff said no); "
                     "fix the cause, then `manage.py redisq dead replay <id>`",
    "timeout": "it ran past its time limit on every attempt; raise @task(timeout=...) or the queue's TIMEOUT, or make it faster",
    "worker_lost": "its worker process died under it (memory limit? os._exit?); see the worker's log",
    "too_many_deliveries": "it was delivered again and again without finishing: it probably kills its worker",
    "cancelled": "cancelled on purpose; `manage.py redisq dead replay <id>` runs it after all",
    "unknown_task": "this worker has no such task: define it in an installed app's tasks.py, or add its module to "
                    "TASKS[alias]['OPTIONS']['IMPORTS'], and restart the worker (enqueue refuses such tasks since)",
    "bad_arguments": "the arguments do not fit the task's signature (was the function changed since it was enqueued?); "
                     "fix the task or enqueue it again with arguments that fit",
    "unknown_schema": "a newer django_redisq wrote it; upgrade this worker, then replay it",
    "bad_message": "its message is not valid (written by hand, or corrupt); `manage.py redisq dead show <id>` shows it",
    "missing_task": "its data was gone from Redis (evicted? flushed?); check Redis's maxmemory-policy (noeviction)",
    "corrupt_task": "its data in Redis is corrupt; `manage.py redisq dead show <id>` shows it",
    "bad_backoff": "the task's backoff function failed or returned a bad delay; fix it, then replay",
    "worker_error": "the worker failed around the task (not the task itself); see the worker's log, then replay",
    "settle_failed": "it ran, but what it left could not be stored (its result, its workflow's bookkeeping); the error "
                     "says which; fix that, then replay (it runs again)",
}
"""What to do about a dead letter, by reason: the end of its WARNING line."""

SUMMARY_EVERY = 10.0
"""Seconds between two summary lines (only windows in which tasks were settled write one)."""


class TaskLog:
    """Thread-safe: settle batches arrive from every executor lane and the flusher."""

    def __init__(self, every: float = SUMMARY_EVERY) -> None:
        self.every = every
        self._lock = threading.Lock()
        self._since = time.monotonic()
        self._kinds: Counter[str] = Counter()
        self._slowest: tuple[float, str, str] = (0.0, "", "")  # duration, task, id

    def settled(self, batch: Sequence[tuple[Any, Any]]) -> None:
        """Log ``(delivery, outcome)`` pairs: failures now, successes in the window (and at DEBUG if enabled)."""
        each = success_log.isEnabledFor(logging.INFO)
        kinds: Counter[str] = Counter()
        slowest = (0.0, "", "")
        for d, o in batch:
            kinds[o.kind] += 1
            if o.duration > slowest[0]:
                slowest = (o.duration, o.task_name or "?", d.id)
            if o.failed or o.kind == DEAD:
                self._line(logging.WARNING, d, o)
            elif each:
                self._line(logging.INFO, d, o, success_log)
        with self._lock:
            self._kinds.update(kinds)
            if slowest[0] > self._slowest[0]:
                self._slowest = slowest
        self.tick()

    def tick(self, force: bool = False) -> None:
        """Write the window's summary if it is due (or ``force``, at shutdown) and tasks were settled in it."""
        now = time.monotonic()
        if not force and now - self._since < self.every:
            return
        with self._lock:
            kinds, slowest, since = self._kinds, self._slowest, self._since
            self._kinds, self._slowest, self._since = Counter(), (0.0, "", ""), now
        total = sum(kinds.values())
        if not total or not task_log.isEnabledFor(logging.INFO):
            return
        seconds = max(now - since, 1e-3)
        parts = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        if not slowest[2]:  # none of them ran (dead-lettered before running: an unknown task, a bad message)
            task_log.info("settled %d task(s) in %.1fs (%.0f/s): %s; none of them ran", total, seconds, total / seconds, parts)
            return
        task_log.info("settled %d task(s) in %.1fs (%.0f/s): %s; slowest %s id=%s %.1fms",
                      total, seconds, total / seconds, parts, slowest[1], slowest[2], slowest[0] * 1000)

    @staticmethod
    def _line(level: int, d: Any, o: Any, logger: logging.Logger = task_log) -> None:
        detail = ""
        if o.kind == DEAD:
            message = " ".join(str(o.error.get("msg") or "").split())
            message = message if len(message) <= 300 else message[:299] + "…"
            detail = f" reason={o.reason}" + (f": {message}" if message else "")
            detail += f"; hint: {HINTS[o.reason]}" if o.reason in HINTS else ""
        elif o.kind == "retry":
            detail = f" retry_in={o.delay_ms}ms"
        logger.log(
            level, "task %s id=%s queue=%s attempt=%d outcome=%s duration=%.1fms%s%s",
            o.task_name or getattr(d, "task", "") or "?", d.id, d.queue, d.deliveries, o.kind, o.duration * 1000, detail,
            "\n" + str(o.error.get("tb") or "").rstrip() if o.failed else "",
        )
