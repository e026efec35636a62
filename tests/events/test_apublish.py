"""``apublish``, ``publish`` for async code: the same entry, the same delivery once per subscription, the same errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.test import override_settings

from django_redisq import connection
from django_redisq.compat import FRAMEWORK
from django_redisq.events import InvalidEvent, apublish, publish
from django_redisq.exceptions import RedisUnreachable
from django_redisq.store.keys import TopicKeys
from tests.events.conftest import HANDLERS, THREE, H, events_settings, runs
from tests.helpers import wait_for

STREAM = TopicKeys("orders.placed").stream


def test_apublish_writes_what_publish_writes_and_each_subscription_runs_it_once(r, running_worker):
    with events_settings(THREE):
        sync_id = publish("orders.placed", {"n": 0})
        async_id = asyncio.run(apublish("orders.placed", {"n": 1}))
        assert async_id > sync_id and r.xlen(STREAM) == 2
        (_, sync_fields), (_, async_fields) = r.xrange(STREAM)
        assert set(sync_fields) == set(async_fields) and async_fields["p"] == '{"n":1}'
        running_worker()
        assert wait_for(lambda: all(runs(r, h) == {sync_id: 1, async_id: 1} for h in HANDLERS), 30)


def test_many_apublish_calls_on_one_loop_each_get_their_own_entry(r):
    async def burst() -> list[str]:
        return await asyncio.gather(*(apublish("orders.placed", {"n": i}) for i in range(50)))

    with events_settings(THREE):
        ids = asyncio.run(burst())
        assert len(set(ids)) == 50 and r.xlen(STREAM) == 50
        assert sorted(int(f["p"][5:-1]) for _, f in r.xrange(STREAM)) == list(range(50))


BAD: list[tuple[Any, Any]] = [
    ("not configured", {"n": 1}), ("", {"n": 1}), (None, {"n": 1}), ("t{x}", {"n": 1}),
    ("t", [1, 2]), ("t", "text"), ("t", {"when": object()}), ("t", {"x": float("nan")}), ("t", {"big": "x" * (600 * 1024)}),
]


@pytest.mark.parametrize(("topic", "payload"), BAD)
def test_apublish_refuses_what_publish_refuses_with_the_same_message_and_writes_nothing(r, topic, payload):
    with events_settings({"a": {"topic": "t", "task": H + "billing"}}):
        with pytest.raises(InvalidEvent) as sync_error:
            publish(topic, payload)
        with pytest.raises(InvalidEvent) as async_error:
            asyncio.run(apublish(topic, payload))
        assert str(async_error.value) == str(sync_error.value)
        assert r.exists(TopicKeys("t").stream) == 0


def test_apublish_on_a_backend_that_is_not_ours_raises_invalid_event(r):
    with override_settings(TASKS={"default": {"BACKEND": f"{FRAMEWORK}.backends.dummy.DummyBackend"}}), pytest.raises(InvalidEvent):
        asyncio.run(apublish("t", {"n": 1}))


def test_redis_out_of_reach_is_the_error_publish_raises(r):
    with events_settings({"a": {"topic": "t", "task": H + "billing"}}, REDIS_URL="redis://127.0.0.1:1/0"):
        connection.reset()
        with pytest.raises(RedisUnreachable) as sync_error:
            publish("t", {"n": 1})
        with pytest.raises(RedisUnreachable) as async_error:
            asyncio.run(apublish("t", {"n": 1}))
    assert "127.0.0.1:1" in str(async_error.value) and type(async_error.value) is type(sync_error.value)
