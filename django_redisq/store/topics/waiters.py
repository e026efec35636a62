"""Durable tasks waiting for an event (``context.wait_for``): the topic's waiters, in the topic's slot.

A waiter is a field ``<queue>|<id>|<step>`` of ``T:waiters`` holding ``{"match", "due"}``. Every
publish counts them in its own script (topic_publish.lua), so a topic nobody waits on costs
nothing more; when there are some, the publisher reads them, matches the payload and wakes each
match in the task's slot (``DurableSteps.wake``), then drops it here. A crash between the two
leaves the waiter: the next publish finds it stale (wait_wake.lua takes nothing) and drops it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from django_redisq.store.topics.steps import Topics

SWEEP = 100
"""Expired waiters ``wait_register.lua`` drops per call, at most."""
READ_MAX = 1000
"""Waiters one publish matches at most (the oldest kept for the next)."""


@dataclass(frozen=True, slots=True)
class Waiter:
    """One task waiting on a topic: where it is, which step waits, what the event must hold, until when."""

    queue: str
    task_id: str
    step: str
    match: dict[str, Any]
    due: int

    @property
    def field(self) -> str:
        return f"{self.queue}|{self.task_id}|{self.step}"

    def matches(self, payload: Any) -> bool:
        """Every key of ``match`` is in the payload with an equal value (compared as JSON values)."""
        return isinstance(payload, dict) and all(k in payload and payload[k] == v for k, v in self.match.items())


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def _parse(field: Any, raw: Any) -> Waiter | None:
    try:
        queue, task_id, step = _text(field).split("|", 2)
        w = json.loads(_text(raw))
        return Waiter(queue, task_id, step, dict(w.get("match") or {}), int(w["due"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class Waiters:
    """The waiters of a backend's topics (a ``Topics`` gives the keys and scripts)."""

    def __init__(self, topics: Topics) -> None:
        self.topics = topics

    def register(self, topic: str, waiter: Waiter) -> int:
        """Add ``waiter`` (dropping expired ones); how many the topic has now."""
        body = json.dumps({"match": waiter.match, "due": waiter.due}, separators=(",", ":"))
        return int(self.topics.broker.scripts.run("wait_register", keys=[self.topics.keys(topic).waiters],
                                                  args=[waiter.field, body, SWEEP]))

    def read(self, topic: str) -> tuple[list[Waiter], list[str]]:
        """The topic's waiters (at most ``READ_MAX``) and the fields that cannot be read (to drop)."""
        client = self.topics.broker.client
        _, rows = client.hscan(self.topics.keys(topic).waiters, 0, count=READ_MAX)
        good, bad = [], []
        for field, raw in cast("dict[Any, Any]", rows).items():
            w = _parse(field, raw)
            if w is None:
                bad.append(_text(field))
            else:
                good.append(w)
        return good, bad

    def drop(self, topic: str, fields: Sequence[str]) -> int:
        if not fields:
            return 0
        return int(self.topics.broker.scripts.run("wait_drop", keys=[self.topics.keys(topic).waiters], args=list(fields)))
