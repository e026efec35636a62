"""Durable sleeps and waits against real ``runworker`` processes: the attempt ends, no slot is held, the task resumes.

Times are the Redis clock's, read from the task's own step records (``at``) and the event's entry id.
"""

from __future__ import annotations

import pytest

from django_redisq.compat import TaskResultStatus
from django_redisq.events import publish
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from tests.conftest import topology_settings
from tests.helpers import keys, wait_for
from tests.testapp import tasks
from tests.testapp.tasks import EFFECTS

pytestmark = pytest.mark.slow


def _records(task_id: str) -> dict:
    return Broker(get_options("default")).durable.load("default", task_id)[1]


def _finished(result) -> bool:
    result.refresh()
    return result.status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


def test_a_sleep_holds_no_slot_and_resumes_after_its_time(r, run_worker_process):
    res = tasks.durable_sleeper.enqueue("s", 2.0)
    run_worker_process("default", "--concurrency", "1")
    assert wait_for(lambda: r.hget(keys().task(res.id), "state") == "scheduled", timeout=30)
    others = [tasks.three_steps.enqueue(f"o{i}", 0) for i in range(3)]
    assert wait_for(lambda: all(_finished(o) for o in others), timeout=10)
    assert r.hget(keys().task(res.id), "state") == "scheduled"  # the others ran on the one slot during the sleep
    assert wait_for(lambda: _finished(res), timeout=10)
    assert res.status == TaskResultStatus.SUCCESSFUL and res.return_value == 1
    recs = _records(res.id)
    resumed_ms = recs["after"].at - recs["sleep#1"].at
    print(f"\nslept 2 s: resumed {resumed_ms} ms after the sleep began")
    assert 2000 <= resumed_ms <= 2500
    assert int(r.hget(EFFECTS, "s:before")) == 1  # the recorded step before the sleep did not run again
    assert int(r.hget(keys().task(res.id), "failures") or 0) == 0  # a sleep is not a failed attempt
    assert int(r.hget(keys().task(res.id), "deliveries")) == 1  # nor a delivery that counts toward too_many_deliveries


def test_a_wait_resumes_within_100ms_of_a_matching_publish(r, run_worker_process):
    res = tasks.durable_waiter.enqueue("w", "orders", 30)
    run_worker_process("default", "--concurrency", "1")
    assert wait_for(lambda: r.hget(keys().task(res.id), "state") == "scheduled", timeout=30)
    with topology_settings(TOPICS={"orders": {}}):
        publish("orders", {"key": "other"})  # no match: the task sleeps on
        entry = publish("orders", {"key": "w", "paid": 12})
    assert wait_for(lambda: _finished(res), timeout=10)
    assert res.status == TaskResultStatus.SUCCESSFUL and res.return_value == {"key": "w", "paid": 12}
    recs = _records(res.id)
    woke_ms = recs["after"].at - int(entry.split("-")[0])
    print(f"\nwait_for: resumed {woke_ms} ms after the matching publish")
    assert 0 <= woke_ms <= 100
    assert recs["wait#1"].event == entry and int(r.hget(EFFECTS, "w:before")) == 1
    assert r.hlen("redisq:{topic:orders}:waiters") == 0  # the woken waiter left the topic


def test_a_wait_ends_in_a_timeout_error_when_no_event_comes(r, run_worker_process):
    res = tasks.durable_waiter.enqueue("t", "orders", 0.5)
    run_worker_process("default", "--concurrency", "1")
    assert wait_for(lambda: _finished(res), timeout=30)
    assert res.status == TaskResultStatus.FAILED
    assert res.errors[-1].exception_class_path == "django_redisq.exceptions.WaitTimeout"
    recs = _records(res.id)
    assert recs["wait#1"].due - recs["wait#1"].at == 500 and r.hget(EFFECTS, "t:after") is None
