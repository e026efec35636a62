"""The journal of one attempt of a durable task: which steps it recorded, and the rules that keep a replay honest.

A durable task runs from the top on every attempt. The journal reads the task's records once
(at its first step), answers a recorded step with its stored result, and records a new one
before the task goes on (``broker.durable``, step_record.lua: the first record of a name wins,
so a copy of the attempt running elsewhere goes on from the same result). A step that raises is
not recorded. The k-th step of a run must be the k-th recorded, under the same name: a name
used twice in a run, or steps that moved, fail the attempt with ``StepError``.

A sleep and a wait are steps too: their record holds a due time on the Redis clock; until it
comes they end the attempt with ``Suspended`` (the worker settles it with suspend.lua, holding
no slot meanwhile), after it a sleep returns at once, and a wait returns its event's payload
(recorded by the publish that matched it, wait_wake.lua) or raises ``WaitTimeout``.
"""

from __future__ import annotations

import json
from typing import Any

from django_redisq.compat import normalize_json
from django_redisq.core.message import dumps
from django_redisq.exceptions import InvalidArguments, StepError, Suspended, WaitTimeout
from django_redisq.store.broker import Broker
from django_redisq.store.steps.durable import StepRecord
from django_redisq.store.topics.steps import Topics
from django_redisq.store.topics.waiters import Waiter, Waiters

STEP, SLEEP, WAIT = "step", "sleep", "wait"


class Journal:
    """One attempt's view of its task's recorded steps; not shared between threads (one attempt runs on one)."""

    def __init__(self, broker: Broker, queue: str, task_id: str, max_bytes: int) -> None:
        """``queue``: the physical queue (a partition's own); ``max_bytes``: RESULT_MAX_BYTES, for all its steps' results."""
        self.broker, self.queue, self.task_id, self.max_bytes = broker, queue, task_id, max_bytes
        self._records: dict[str, StepRecord] | None = None
        self._by_index: dict[int, StepRecord] = {}
        self._used: set[str] = set()
        self._next = 0
        self._stored = 0  # bytes of the results recorded so far

    def _load(self) -> dict[str, StepRecord]:
        if self._records is None:
            _, self._records = self.broker.durable.load(self.queue, self.task_id)
            self._by_index = {rec.index: rec for rec in self._records.values()}
            self._stored = sum(rec.size for rec in self._records.values())
        return self._records

    def default_name(self, kind: str) -> str:
        """The name of an unnamed sleep or wait: its kind and position (stable, since the order is checked)."""
        return f"{kind}#{self._next}"

    def claim(self, name: str, kind: str) -> tuple[int, StepRecord | None]:
        """The position of step ``name`` in this run and its record if it has one; ``StepError`` on a broken rule."""
        if not isinstance(name, str) or not name or "|" in name:
            raise StepError(f"a step needs a name, a non-empty string without '|' (got {name!r})")
        if name in self._used:
            raise StepError(f"step {name!r} of task {self.task_id} was used twice in one run: give each step its own name")
        self._used.add(name)
        index, self._next = self._next, self._next + 1
        rec = self._load().get(name)
        if rec is not None and (rec.index != index or rec.kind != kind):
            raise StepError(f"step {name!r} of task {self.task_id} ran as {kind} #{index}, but was recorded as "
                            f"{rec.kind} #{rec.index}: steps must keep their order between attempts")
        other = self._by_index.get(index)
        if rec is None and other is not None:
            raise StepError(f"step #{index} of task {self.task_id} is {name!r} in this run, but {other.name!r} was "
                            "recorded there: steps must keep their order between attempts")
        return index, rec

    def save(self, name: str, index: int, value: Any, took_ms: int) -> Any:
        """Record a step's result before the task goes on; the result that stands (ours, or a copy's that won)."""
        try:
            text = dumps(normalize_json(value))
        except (TypeError, ValueError, RecursionError) as exc:
            raise type(exc)(f"the result of step {name!r} is not JSON: {exc}") from None
        size = len(text.encode("utf-8", "surrogateescape"))
        if self._stored + size > self.max_bytes:
            raise InvalidArguments(f"step {name!r} would bring task {self.task_id}'s recorded results to "
                                   f"{self._stored + size} bytes; the limit is {self.max_bytes} (RESULT_MAX_BYTES)")
        got = self.broker.durable.record(self.queue, self.task_id, name, index, STEP, took_ms=took_ms, value_json=text)
        self._stored += got.record.size
        return json.loads(got.record.value_json)

    def sleep(self, name: str, due: tuple[str, int]) -> None:
        """Return once the sleep's due time has come; until then end the attempt (``Suspended``)."""
        index, _ = self.claim(name, SLEEP)
        got = self.broker.durable.record(self.queue, self.task_id, name, index, SLEEP, due=due)
        if got.record.due > got.now:
            raise Suspended(name, SLEEP)

    def wait(self, name: str, topic: str, match: dict[str, Any], timeout_ms: int) -> Any:
        """The payload of the first event on ``topic`` that holds ``match``; ``WaitTimeout`` past the timeout."""
        index, _ = self.claim(name, WAIT)
        got = self.broker.durable.record(self.queue, self.task_id, name, index, WAIT, due=("in", timeout_ms))
        rec = got.record
        if rec.state != "waiting":
            return json.loads(rec.value_json)
        if rec.due <= got.now:
            raise WaitTimeout(f"no event on topic {topic!r} matched {match!r} within {rec.due - rec.at} ms (wait {name!r})")
        Waiters(Topics(self.broker)).register(topic, Waiter(self.queue, self.task_id, name, match, rec.due))
        raise Suspended(name, WAIT)
