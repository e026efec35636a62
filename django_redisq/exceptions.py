"""Exceptions raised by django_redisq; the broker maps script codes to these."""

from __future__ import annotations


class RedisQError(Exception):
    """Base class of every django_redisq error."""


class InvalidArguments(RedisQError, ValueError):
    """Task arguments that cannot be stored (not JSON round-trippable, too large)."""


class LeaseLost(RedisQError):
    """The worker no longer owns the task: it was reaped and handed to another worker."""


class TaskNotFound(RedisQError, LookupError):
    """No task with this id in the queues searched."""


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


class Retry(RedisQError):
    """Raise inside a task to ask for another attempt, optionally after ``delay`` seconds.

    It counts against ``max_retries`` like any other failure.
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry requested")
        self.delay = delay


class Fenced(RedisQError):
    """The worker was reaped (it was paused or cut off past WORKER_TIMEOUT): what it holds is no longer its own."""
