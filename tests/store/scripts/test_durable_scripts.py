"""The durable tasks' scripts, each through the store's own methods, on one Redis and on the cluster (slot proof).

step_record.lua, step_load.lua, step_clear.lua and suspend.lua live in the task's slot;
wait_register.lua and wait_drop.lua in the topic's; wait_wake.lua in the task's again.
"""

from __future__ import annotations

import pytest

from django_redisq.durable.wake import wake_waiters
from django_redisq.exceptions import LeaseLost, TaskNotFound
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.steps.durable import READY, SCHEDULED
from django_redisq.store.topics.steps import Topics
from django_redisq.store.topics.waiters import Waiter, Waiters
from tests.helpers import keys, redis_ms, seed_hash, seed_processing


@pytest.fixture
def broker(r) -> Broker:
    return Broker(get_options("default"))


def test_a_step_is_recorded_once_and_the_first_record_stands(r, broker):
    seed_processing(r, "t1", "w1")
    first = broker.durable.record("default", "t1", "charge", 0, "step", took_ms=5, value_json='{"paid":1}')
    again = broker.durable.record("default", "t1", "charge", 0, "step", took_ms=9, value_json='{"paid":2}')
    assert first.new and not again.new and again.record.value_json == '{"paid":1}' and again.record.took == 5
    now, records = broker.durable.load("default", "t1")
    assert list(records) == ["charge"] and records["charge"].size == 10 and abs(now - redis_ms(r)) < 1000
    with pytest.raises(TaskNotFound):
        broker.durable.record("default", "gone", "charge", 0, "step")
    assert not r.exists(keys().task("gone"))  # no stray hash without the task's TTL


def test_an_operator_clears_one_step_unless_the_task_runs(r, broker):
    seed_hash(r, "t2", "dead")
    broker.durable.record("default", "t2", "one", 0, "step")
    broker.durable.record("default", "t2", "two", 1, "step")
    assert broker.durable.clear("default", "t2", "two") and not broker.durable.clear("default", "t2", "two")
    assert list(broker.durable.load("default", "t2")[1]) == ["one"]
    r.hset(keys().task("t2"), "state", "running")
    with pytest.raises(ValueError, match="running"):
        broker.durable.clear("default", "t2", "one")


def test_suspend_schedules_a_sleep_at_its_redis_due_time_and_gives_the_delivery_back(r, broker):
    seed_processing(r, "t3", "w1")
    r.hset(keys().task("t3"), mapping={"deliveries": 3, "workers": "w1,w1"})
    rec = broker.durable.record("default", "t3", "sleep#0", 0, "sleep", due=("in", 60_000)).record
    assert broker.durable.suspend("default", "w1", "t3", "sleep#0", 0) == SCHEDULED
    assert r.zscore(keys().scheduled, "t3") == rec.due and rec.due - rec.at == 60_000
    t = r.hgetall(keys().task("t3"))
    assert (t["state"], t["deliveries"], t["workers"], r.exists(keys().status("t3"))) == ("scheduled", "2", "w1", 0)
    with pytest.raises(LeaseLost):
        broker.durable.suspend("default", "w1", "t3", "sleep#0", 0)


def test_a_publish_wakes_a_matching_waiter_in_the_tasks_slot(r, broker):
    seed_processing(r, "t4", "w1")
    rec = broker.durable.record("default", "t4", "wait#0", 0, "wait", due=("in", 60_000)).record
    waiters = Waiters(Topics(broker))
    assert waiters.register("orders", Waiter("default", "t4", "wait#0", {"id": 7}, rec.due)) == 1
    assert broker.durable.suspend("default", "w1", "t4", "wait#0", 0) == SCHEDULED
    entry, waiting = Topics(broker).publish_counted("orders", '{"id":8}')
    assert waiting == 1 and wake_waiters(broker, "orders", entry, '{"id":8}') == 0  # no match: still waits
    entry, _ = Topics(broker).publish_counted("orders", '{"id":7,"x":1}')
    assert wake_waiters(broker, "orders", entry, '{"id":7,"x":1}') == 1
    assert r.zscore(keys().scheduled, "t4") is None and "t4" in r.lrange(keys().pending, 0, -1)
    woke = broker.durable.load("default", "t4")[1]["wait#0"]
    assert (woke.state, woke.value_json, woke.event) == ("done", '{"id":7,"x":1}', entry)
    assert waiters.read("orders") == ([], [])  # dropped (wait_drop.lua)


def test_an_event_before_the_settle_makes_the_suspension_ready_at_once(r, broker):
    seed_processing(r, "t5", "w1")
    broker.durable.record("default", "t5", "wait#0", 0, "wait", due=("in", 60_000))
    assert broker.durable.wake("default", "t5", "wait#0", '{"a":1}', "1-0") == 2  # recorded; not yet suspended
    assert broker.durable.suspend("default", "w1", "t5", "wait#0", 0) == READY
    assert r.lrange(keys().pending, 0, -1) == ["t5"]

