"""Exceptions raised by django_redisq; the broker maps script codes to these."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis


class RedisQError(Exception):
    """Base class of every django_redisq error."""


class InvalidArguments(RedisQError, TypeError, ValueError):
    """Task arguments that cannot be stored (not JSON round-trippable, too large).

    A ``TypeError`` because Django's backends raise ``TypeError`` for arguments
    that are not JSON, so ``except TypeError`` around ``enqueue()`` catches ours
    too; still a ``ValueError``, as it always was here.
    """


class LeaseLost(RedisQError):
    """The worker no longer owns the task: it was reaped and handed to another worker."""


class TaskNotFound(RedisQError, LookupError):
    """No task with this id in the queues searched."""


class MessageChanged(RedisQError):
    """A dead letter's stored message is no longer the one an edit started from: nothing was written."""


class UnknownSchema(RedisQError):
    """A message written by a newer (or foreign) version of django_redisq."""


class BadMessage(RedisQError):
    """A message that cannot be decoded into a task call. ``reason`` is a short code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class RedisUnavailable(RedisQError):
    """Redis cannot be reached, or is too old; the message says which and how to fix it."""


class RedisUnreachable(RedisUnavailable, redis.ConnectionError):
    """Redis could not be reached by an enqueue, a result or progress read, a cancel, a publish or a workflow call.

    One line: the server as configured (without its password), redis-py's reason and what to check. A
    ``redis.ConnectionError`` too, so code that caught redis-py's error around ``enqueue()`` still catches it;
    the original error is ``cause``.
    """

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class NotDurable(RedisUnavailable, redis.RedisError):
    """Fewer replicas than ``DURABLE_REPLICAS`` acknowledged a write within ``DURABLE_TIMEOUT``.

    The write IS on the master (the task is stored, the ack is done there); it
    may or may not survive a failover. ``acked`` replicas of ``wanted`` took it
    within ``timeout`` seconds; ``task_ids`` are the tasks of an enqueue. A
    ``redis.RedisError`` too, so code that catches Redis's errors around
    ``enqueue`` catches this one, and the worker counts it as transient: a
    settle step calls ``again`` (the WAIT once more, on the same connection).
    """

    def __init__(self, message: str, *, acked: int = 0, wanted: int = 0, timeout: float = 0.0, task_ids: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.acked, self.wanted, self.timeout = acked, wanted, timeout
        self.task_ids = list(task_ids)
        self.again: Callable[[], Any] | None = None


class Retry(RedisQError):
    """Raise inside a task to ask for another attempt, optionally after ``delay`` seconds.

    It counts against ``max_retries`` like any other failure.
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry requested")
        self.delay = delay


class InvalidBackoff(RedisQError):
    """A task's ``backoff`` callable raised or returned something that is not a delay.

    Recorded instead of the task's own failure, which is its ``__cause__`` (so
    the dead letter shows both tracebacks); the task is dead-lettered with
    reason ``bad_backoff`` and the worker goes on.
    """


class Fenced(RedisQError):
    """The worker was reaped (it was paused or cut off past WORKER_TIMEOUT): what it holds is no longer its own."""


class QueuePaused(RedisQError):
    """The queue is paused: a fetch took nothing (enqueues still succeed)."""


class TaskTimeout(BaseException):
    """Raised inside a task that ran past its time limit (``@task(timeout=...)``, ``TIMEOUT``).

    A ``BaseException``, like ``KeyboardInterrupt`` and ``asyncio.CancelledError``
    (and Dramatiq's ``TimeLimitExceeded``): the ``except Exception`` blocks that
    tasks and the libraries they call are full of do not swallow it, so a late
    task really stops. ``finally`` blocks and context managers still run; a task
    may catch ``TaskTimeout`` by name to clean up. It is raised once, from the
    worker's watchdog thread, when the task's thread next runs Python code: a
    blocking C call (``time.sleep``, a socket read without a timeout) is not
    interrupted. The attempt counts as failed and is retried by the task's retry
    policy, then dead-lettered with reason ``timeout``.
    """

    limit: float | None = None  # seconds; set by the runner

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or ("the task exceeded its time limit",)))


class TaskCancelled(BaseException):
    """The task was cancelled (``redisq cancel``, the admin, ``django_redisq.cancel``); it is never retried.

    Raised inside a running task on the thread pool (when its thread next runs
    Python code), as the cancellation of its coroutine on the asyncio pool; on
    the process pool the child running it is killed. A ``BaseException`` for the
    same reason as ``TaskTimeout``. The task's result is FAILED with this error,
    and it is dead-lettered with reason ``cancelled`` (replay it to run it after all).
    """

    def __init__(self, *args: object) -> None:
        super().__init__(*(args or ("the task was cancelled",)))


class WorkerLost(RedisQError):
    """The process running the task died mid-task (a segfault, the OOM killer, a hard time limit).

    Recorded as the attempt's error; the attempt counts as failed and is retried
    by the task's policy, then dead-lettered with reason ``worker_lost``.
    """


class StepError(RedisQError):
    """A durable task's steps broke a rule: a name used twice in one run, or steps in another order than recorded.

    It fails the attempt, never retried (another attempt would meet the same code), so the task is
    dead-lettered with this message; fix the code, then replay it (django_redisq/durable/).
    """


class WaitTimeout(RedisQError, TimeoutError):
    """``context.wait_for`` saw no matching event within its timeout (raised in the task; not retried)."""


class Suspended(BaseException):
    """Raised by a durable task's sleep or wait to end its attempt without failing it (caught by the worker).

    A ``BaseException``, so a task's ``except Exception`` does not swallow it; the worker settles the
    attempt with suspend.lua, scheduling the task at the step's due time (or until its event comes).
    """

    def __init__(self, step: str, kind: str) -> None:
        super().__init__(f"suspended in {kind} {step!r}")
        self.step, self.kind = step, kind


class UnknownQueue(RedisQError, LookupError):
    """A queue (or backend) the settings do not name, perhaps removed since its tasks were stored."""


RedisError = redis.RedisError
"""redis-py's base error: every failure of Redis the store lets through is one. Code above the store catches it
from here (only the store and the connection layer import redis)."""
