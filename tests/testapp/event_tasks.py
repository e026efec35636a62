"""Subscription tasks for tests/events: each records every run in a Redis HASH, so a test counts effects.

The effects go to ``REDISQ_CHAOS_EFFECTS_URL`` when set (a store apart from the queue's Redis,
as for tests/testapp/chaos_tasks.py), else to the queue's own Redis (keys ``events:*``):
``events:runs:<handler>`` (HASH): event id -> number of runs; ``events:seen:<handler>`` (LIST) the payloads' ``n``;
``events:by:<handler>`` (LIST): ``<event id>|<pid>`` per run.
"""

from __future__ import annotations

import os
from typing import Any

from django_redisq import task
from tests.testapp.chaos_tasks import effects_store


def _record(handler: str, payload: dict[str, Any], event_id: str) -> None:
    store = effects_store()
    pipe = store.pipeline(transaction=True)
    pipe.hincrby(f"events:runs:{handler}", event_id, 1)
    pipe.rpush(f"events:seen:{handler}", str(payload.get("n", "")))
    pipe.rpush(f"events:by:{handler}", f"{event_id}|{os.getpid()}")
    pipe.execute()


@task()
def billing(payload: dict[str, Any], event_id: str) -> None:
    _record("billing", payload, event_id)


@task(queue_name="emails")
def mail(payload: dict[str, Any], topic: str, event_id: str) -> None:
    _record("mail", payload, event_id)


@task(queue_name="low")
def audit(payload: dict[str, Any], **extra: Any) -> None:
    _record("audit", payload, extra["event_id"])


@task()
def plain(payload: dict[str, Any]) -> None:
    """Takes the payload only: no event_id / topic keyword is passed."""
    _record("plain", payload, str(payload.get("n")))


@task()
def two_args(a: Any, b: Any) -> None:
    """Cannot take an event (E107)."""


@task(queue_name="low")
def refund(payload: dict[str, Any], event_id: str, topic: str) -> None:
    _record("refund", payload, event_id)


@task()
def tally(payload: dict[str, Any]) -> None:
    """The benchmark's handler (bench/events.py): one INCR per run, nothing else."""
    effects_store().incr("events:tally")


@task(queue_name="low")
def lifecycle_log(payload: dict[str, Any], event_id: str) -> None:
    """A subscription of the lifecycle topic: records ``<event id>|<task id>|<state>|<task>`` (in the order they ran)."""
    effects_store().rpush("events:lifecycle", f"{event_id}|{payload['task_id']}|{payload['state']}|{payload['task']}")
