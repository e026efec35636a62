"""``DurableContext``: the ``TaskContext`` a worker gives a task declared ``@task(takes_context=True)``.

Beside Django's ``task_result`` and ``attempt`` it offers durable execution: ``step`` runs a
callable once per task and name (its result recorded before the task goes on, replayed on
later attempts), ``sleep`` / ``sleep_until`` end the attempt until a time without holding a
worker, and ``wait_for`` until an event on a topic matches. Each has an ``a``-prefixed twin
for async tasks. Outside a worker (a context built by hand, Django's ImmediateBackend) there
is no journal: a step just calls its callable, and sleeps and waits raise ``StepError``.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from asgiref.sync import sync_to_async

from django_redisq.compat import TaskContext
from django_redisq.core.options import NAME_RE
from django_redisq.durable.journal import SLEEP, STEP, WAIT, Journal
from django_redisq.exceptions import StepError
from django_redisq.store.broker import Broker
from django_redisq.store.steps.durable import StepRecord

R = TypeVar("R")

DEFAULT_WAIT = 86_400.0
"""Seconds ``wait_for`` waits for its event unless told otherwise."""


def _ms(seconds: float | timedelta) -> int:
    value = seconds.total_seconds() if isinstance(seconds, timedelta) else float(seconds)
    if not value >= 0:
        raise ValueError(f"a duration must be a number of seconds >= 0, got {seconds!r}")
    return int(value * 1000)


def _epoch_ms(when: datetime) -> int:
    if when.tzinfo is None:
        raise ValueError("sleep_until needs an aware datetime (django.utils.timezone.now() + ...)")
    return int(when.timestamp() * 1000)


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableContext(TaskContext):  # type: ignore[misc]  # the stubs call Django's frozen TaskContext unfrozen
    """A task's context with durable steps, sleeps and waits (``journal`` is the worker's; None elsewhere)."""

    journal: Journal | None = None

    def _journal(self, what: str) -> Journal:
        if self.journal is None:
            raise StepError(f"{what} needs a django_redisq worker: this context has no journal")
        return self.journal

    def step(self, name: str, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> R:
        """``fn(*args, **kwargs)`` once for this task and ``name``: a recorded step returns its stored result."""
        if self.journal is None:
            return fn(*args, **kwargs)
        index, rec = self.journal.claim(name, STEP)
        if rec is not None:
            return rec_value(rec)
        start = time.perf_counter()
        value = fn(*args, **kwargs)
        return self.journal.save(name, index, value, int((time.perf_counter() - start) * 1000))  # type: ignore[no-any-return]

    async def astep(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``step`` in an async task: ``fn`` may be a coroutine function (awaited) or a plain one."""
        journal = self.journal
        if journal is None:
            value = fn(*args, **kwargs)
            return await value if inspect.isawaitable(value) else value
        index, rec = await sync_to_async(journal.claim, thread_sensitive=False)(name, STEP)
        if rec is not None:
            return rec_value(rec)
        start = time.perf_counter()
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        took = int((time.perf_counter() - start) * 1000)
        return await sync_to_async(journal.save, thread_sensitive=False)(name, index, value, took)

    def sleep(self, seconds: float | timedelta, *, name: str | None = None) -> None:
        """Sleep without holding a worker: the attempt ends, and the task runs again from the top once it is due."""
        journal = self._journal("sleep")
        journal.sleep(name or journal.default_name(SLEEP), ("in", _ms(seconds)))

    def sleep_until(self, when: datetime, *, name: str | None = None) -> None:
        """``sleep`` until an aware datetime (compared with the Redis clock)."""
        journal = self._journal("sleep_until")
        journal.sleep(name or journal.default_name(SLEEP), ("at", _epoch_ms(when)))

    async def asleep(self, seconds: float | timedelta, *, name: str | None = None) -> None:
        journal = self._journal("asleep")
        await sync_to_async(journal.sleep, thread_sensitive=False)(name or journal.default_name(SLEEP), ("in", _ms(seconds)))

    async def asleep_until(self, when: datetime, *, name: str | None = None) -> None:
        journal = self._journal("asleep_until")
        await sync_to_async(journal.sleep, thread_sensitive=False)(name or journal.default_name(SLEEP), ("at", _epoch_ms(when)))

    def wait_for(self, topic: str, *, match: dict[str, Any] | None = None, timeout: float | timedelta = DEFAULT_WAIT,
                 name: str | None = None) -> Any:
        """The payload of the first event published on ``topic`` (after the wait began) holding ``match``'s items.

        The attempt ends meanwhile, holding no worker; ``WaitTimeout`` once ``timeout`` passes without one.
        """
        journal = self._journal("wait_for")
        return journal.wait(name or journal.default_name(WAIT), *_wait_args(topic, match, timeout))

    async def await_for(self, topic: str, *, match: dict[str, Any] | None = None, timeout: float | timedelta = DEFAULT_WAIT,
                        name: str | None = None) -> Any:
        """``wait_for`` in an async task."""
        journal = self._journal("await_for")
        return await sync_to_async(journal.wait, thread_sensitive=False)(
            name or journal.default_name(WAIT), *_wait_args(topic, match, timeout))


def rec_value(rec: StepRecord) -> Any:
    """A recorded step's result, decoded."""
    return json.loads(rec.value_json)


def _wait_args(topic: str, match: dict[str, Any] | None, timeout: float | timedelta) -> tuple[str, dict[str, Any], int]:
    if not isinstance(topic, str) or not NAME_RE.match(topic):
        raise ValueError(f"topic {topic!r} is not a valid topic name")
    if match is not None and not isinstance(match, dict):
        raise TypeError(f"match must be a dict of the payload's items to hold, got {type(match).__name__}")
    return topic, dict(match or {}), _ms(timeout)


def attach_journal(context: object, broker: Broker, queue: str, task_id: str, max_bytes: int) -> None:
    """Give a ``DurableContext`` its attempt's journal (the worker does, per attempt); any other context is left alone."""
    if isinstance(context, DurableContext):
        object.__setattr__(context, "journal", Journal(broker, queue, task_id, max_bytes))


__all__ = ["DurableContext", "attach_journal"]
