"""A task's exception, reported where errors are collected: a logger for every reporter, Sentry by name.

``OPTIONS["ERROR_REPORTING"]`` says when: ``"attempt"`` (the default) reports each
failed attempt, ``"dead"`` only the attempt after which the task is a dead letter,
``"off"`` none. A cancellation (an operator's decision) is never reported, nor a
``Retry`` the task raised to be tried again (unless it leaves the task dead).

Each report is:

- a record at ERROR on the logger ``django_redisq.errors``, with the exception
  (``exc_info``) and ``extra`` fields ``redisq_task``, ``redisq_task_id``,
  ``redisq_queue``, ``redisq_attempt``, ``redisq_outcome``: what a logging-based
  reporter (Rollbar, Bugsnag, a log shipper) picks up, from the process that ran
  the task (a process-pool child included, where the traceback's frames are);
- where ``sentry_sdk`` is imported and initialised (``sentry_sdk.init`` in the
  settings), one Sentry event of the exception, captured in a scope tagged
  ``redisq.task``, ``redisq.task_id``, ``redisq.queue``, ``redisq.attempt`` and
  ``redisq.outcome``. Sentry's logging integration is told to ignore the record
  above and Django's own ``django.tasks`` ERROR line of a failed task (this
  reports it, tagged), so each failure is one event, not two or three.

The logger ``django_redisq.errors`` does not propagate (and has a ``NullHandler``):
the worker already logs each failed attempt once, at WARNING with its traceback,
for people reading its log, and a second ERROR line of the same failure in that log
would be noise. A ``LOGGING`` entry that names the logger routes its records to a
reporter's handler (docs/howto/error-reporting.md).

A report that fails is logged and dropped: reporting never changes what becomes of the task.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from django_redisq.exceptions import Retry, TaskCancelled
from django_redisq.worker.running.outcome import DEAD, SUCCESS, from_user_code

logger = logging.getLogger("django_redisq")
errors = logging.getLogger("django_redisq.errors")
errors.propagate = False  # for the handlers LOGGING gives it, not the worker's log (see above); a config naming it decides
errors.addHandler(logging.NullHandler())  # no handler at all would make logging print ERROR records on stderr anyway
"""Where each reported exception goes, at ERROR with its traceback."""

SENTRY_QUIET = ("django_redisq.errors", "django.tasks", "django_tasks")
"""Loggers whose records Sentry's logging integration must not turn into events as well: this reports them."""


class ErrorReporter:
    """One per runner (per process that runs tasks)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._quieted: Any = None  # the Sentry client the loggers were quieted for

    def wanted(self, exc: BaseException, outcome_kind: str) -> bool:
        if self.mode == "off" or outcome_kind == SUCCESS or isinstance(exc, TaskCancelled):
            return False
        if self.mode == "dead" and outcome_kind != DEAD:
            return False
        return not (isinstance(exc, Retry) and outcome_kind != DEAD)

    def report(self, exc: BaseException, task_name: str, task_id: str, queue: str, attempt: int, outcome_kind: str) -> None:
        """Report ``exc`` of one attempt if the mode wants it; never raises."""
        if not self.wanted(exc, outcome_kind):
            return
        tags = {"task": task_name, "task_id": task_id, "queue": queue, "attempt": attempt, "outcome": outcome_kind}
        try:
            sentry = self._sentry()  # first: Sentry's logging integration then ignores the record below
        except Exception:
            logger.exception("reading the Sentry client failed; the exception of task %s id=%s is logged only", task_name, task_id)
            sentry = None
        errors.error("task %s id=%s on %s failed (attempt %d, %s): %s: %s", task_name, task_id, queue, attempt,
                     outcome_kind, type(exc).__name__, exc, exc_info=(type(exc), exc, from_user_code(exc.__traceback__)),  # from the task's code
                     extra={f"redisq_{name}": value for name, value in tags.items()})
        if sentry is None:
            return
        try:
            with sentry.new_scope() as scope:
                for name, value in tags.items():
                    scope.set_tag(f"redisq.{name}", value)
                scope.set_context("redisq", tags)
                sentry.capture_exception(exc)
        except Exception:
            logger.exception("reporting the exception of task %s id=%s to Sentry failed", task_name, task_id)

    def _sentry(self) -> Any:
        """``sentry_sdk`` when it is imported and initialised (its loggers quieted for this client), else None."""
        sentry = sys.modules.get("sentry_sdk")
        if sentry is None or not sentry.get_client().is_active():
            return None
        self._quiet(sentry)
        return sentry

    def _quiet(self, sentry: Any) -> None:
        client = sentry.get_client()
        if self._quieted is client:
            return
        from sentry_sdk.integrations.logging import ignore_logger  # optional: only where Sentry is installed

        for name in SENTRY_QUIET:
            ignore_logger(name)
        self._quieted = client
