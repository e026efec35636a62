"""Fixtures of the events tests: TASKS with SUBSCRIPTIONS / TOPICS, and an in-process worker in a thread."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from django_redisq import connection
from django_redisq.worker.worker import Worker

H = "tests.testapp.event_tasks."
THREE = {"billing-on-order": {"topic": "orders.placed", "task": H + "billing"},
         "mail-on-order": {"topic": "orders.placed", "task": H + "mail"},
         "audit": {"topic": "orders.placed", "task": H + "audit", "start": "earliest"}}
HANDLERS = ("billing", "mail", "audit")


@contextmanager
def events_settings(subscriptions: dict[str, Any] | None = None, topics: dict[str, Any] | None = None,
                    **options: Any) -> Iterator[None]:
    tasks = copy.deepcopy(settings.TASKS)
    opts = tasks["default"]["OPTIONS"]
    if subscriptions is not None:
        opts["SUBSCRIPTIONS"] = subscriptions
    if topics is not None:
        opts["TOPICS"] = topics
    opts.update(options)
    with override_settings(TASKS=tasks):
        yield
    connection.reset()


@pytest.fixture
def running_worker() -> Iterator[Callable[..., Worker]]:
    """Start an in-process Worker (events on) in a thread; each is stopped at the test's end."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start(*queues: str, **kwargs: Any) -> Worker:
        kwargs.setdefault("concurrency", 4)
        w = Worker(list(queues) or ["default", "emails", "low"], **kwargs)
        t = threading.Thread(target=w.run, daemon=True)
        t.start()
        started.append((w, t))
        return w

    yield start
    for w, _ in started:
        w.request_stop()
    for _, t in started:
        t.join(30)


def runs(r: Any, handler: str) -> dict[str, int]:
    """event id -> times ``handler`` ran for it."""
    return {k: int(v) for k, v in r.hgetall(f"events:runs:{handler}").items()}
