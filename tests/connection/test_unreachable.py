"""Redis out of reach, from every door a program calls: one ``RedisUnreachable`` line, never redis-py's chain.

Before, ``enqueue()`` with Redis down raised redis-py's ``ConnectionError`` through 78 lines of traceback with no
hint, while ``runworker`` said one line and exited 3 (tests/ops/test_cli.py). Each door here is a public call.
"""

from __future__ import annotations

import asyncio
import copy
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import override_settings

import django_redisq
from django_redisq import connection
from django_redisq.events import publish
from django_redisq.exceptions import RedisUnreachable
from django_redisq.workflows.canvas import chain
from django_redisq.workflows.result import WorkflowResult
from tests.testapp import tasks

DOWN = "redis://:hunter2@127.0.0.1:1/0"  # port 1: refused at once
NO_SUCH = "x" * 32

DOORS: dict[str, Callable[[], Any]] = {
    "enqueue": lambda: tasks.noop.enqueue(1),
    "aenqueue": lambda: asyncio.run(tasks.noop.aenqueue(1)),
    "enqueue_many": lambda: tasks.noop.enqueue_many([((1,), {}), ((2,), {})]),
    "get_result": lambda: tasks.noop.get_result(NO_SUCH),
    "aget_result": lambda: asyncio.run(tasks.noop.aget_result(NO_SUCH)),
    "get_progress": lambda: django_redisq.get_progress(NO_SUCH),
    "aget_progress": lambda: asyncio.run(django_redisq.aget_progress(NO_SUCH)),
    "cancel": lambda: django_redisq.cancel(NO_SUCH),
    "publish": lambda: publish("orders.placed", {"order": 1}),
    "a workflow": lambda: chain(tasks.add.s(1, 2), tasks.add.s(3)).enqueue(),
    "get_workflow": lambda: django_redisq.get_workflow(NO_SUCH),
    "WorkflowResult.refresh": lambda: WorkflowResult("default", NO_SUCH).refresh(),
}


@pytest.fixture
def redis_down() -> Iterator[None]:
    value = copy.deepcopy(settings.TASKS)
    opts = value["default"]["OPTIONS"]
    opts["REDIS_URL"] = DOWN
    opts["SUBSCRIPTIONS"] = {"audit": {"topic": "orders.placed", "task": "tests.testapp.tasks.noop"}}
    connection.reset()
    with override_settings(TASKS=value):
        yield
    connection.reset()


@pytest.mark.parametrize("door", DOORS)
def test_every_door_says_one_line_with_the_server_and_what_to_check(door: str, redis_down: None):
    with pytest.raises(RedisUnreachable) as caught:
        DOORS[door]()
    error = caught.value
    text = str(error)
    assert "\n" not in text and text.startswith("cannot reach Redis at redis://127.0.0.1:1/0: ConnectionError"), text
    assert "is a Redis server running there" in text
    printed = "".join(traceback.format_exception(error))
    assert "hunter2" not in text + repr(error) + printed
    assert "During handling of the above exception" not in printed and "direct cause" not in printed  # ours alone
    assert isinstance(error.cause, redis.ConnectionError)
    assert isinstance(error, redis.ConnectionError)  # code that caught redis-py's error around enqueue() still does


def test_a_door_inside_a_door_says_it_once(redis_down: None):
    """enqueue() is enqueue_many() of one, both doors: the line is not wrapped twice."""
    with pytest.raises(RedisUnreachable) as caught:
        tasks.noop.enqueue(1)
    assert str(caught.value).count("cannot reach Redis") == 1 and not isinstance(caught.value.cause, RedisUnreachable)
