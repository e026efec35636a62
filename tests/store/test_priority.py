"""Django's ``priority`` end to end: validated at enqueue, run in order by a real worker, kept by every path back."""

import threading
import time

import pytest

from django_redisq.compat import InvalidTask, TaskResultStatus
from django_redisq.worker.worker import Worker
from tests.helpers import drain, keys, wait_for
from tests.testapp import tasks
from tests.testapp.tasks import ORDER


def ran(r) -> list[str]:
    return r.lrange(ORDER, 0, -1)


def test_a_worker_runs_higher_priorities_first(r, make_worker):
    for key, priority in [("low", -10), ("plain1", 0), ("urgent", 100), ("plain2", 0), ("high", 10), ("lowest", -100)]:
        tasks.in_order.using(priority=priority).enqueue(key)
    make_worker(concurrency=1, prefetch=1).run()
    assert ran(r) == ["urgent", "high", "plain1", "plain2", "low", "lowest"]


def test_fifo_within_one_priority_over_many(r, make_worker):
    tasks.in_order.using(priority=5).enqueue_many([([f"k{i:03d}"], {}) for i in range(200)])
    make_worker(concurrency=1, prefetch=1).run()
    assert ran(r) == [f"k{i:03d}" for i in range(200)]


@pytest.mark.parametrize("bad", [101, -101, 1.5])
def test_a_priority_out_of_range_is_refused_clearly(r, bad):
    with pytest.raises(InvalidTask, match="priority"):
        tasks.in_order.using(priority=bad).enqueue("x")
    assert r.llen(keys().pending) == 0 and not r.exists(keys().prioritized)


def test_the_result_keeps_the_priority(r):
    res = tasks.in_order.using(priority=42).enqueue("x")
    assert res.task.priority == 42
    assert tasks.in_order.get_result(res.id).task.priority == 42
    assert tasks.in_order.get_result(tasks.in_order.enqueue("y").id).task.priority == 0


def test_a_retried_task_keeps_its_priority(r, make_worker):
    """flaky fails twice: each retry comes back through scheduled and promote at priority 30."""
    res = tasks.flaky.using(priority=30).enqueue("pf", 1)
    drain(make_worker, [res])
    assert res.status == TaskResultStatus.SUCCESSFUL and res.attempts == 2
    assert r.hget(keys().task(res.id), "prio") == "30"


def test_an_idle_worker_wakes_at_once_for_a_prioritized_task(r, settings):
    """No polling: the marker wakes a worker blocked in BLMOVE well before its block timeout."""
    worker = Worker(concurrency=1, burst=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: r.zcard(keys().workers) == 1, timeout=5)
        time.sleep(0.3)  # the fetcher is blocked now
        latencies = []
        for i in range(5):
            start = time.monotonic()
            res = tasks.in_order.using(priority=60).enqueue(f"w{i}")
            assert wait_for(lambda res=res: res.refresh() or res.status == TaskResultStatus.SUCCESSFUL, timeout=5, step=0.002)
            latencies.append(time.monotonic() - start)
            time.sleep(0.2)
        # the block timeout is 1 s: a poll would miss this (the median, and half the block: a loaded machine's room)
        assert sorted(latencies)[2] < 0.5, latencies
    finally:
        worker.request_stop()
        thread.join(10)


def test_a_periodic_task_fires_at_its_priority(r):
    from django_redisq.settings.read import get_options
    from django_redisq.store.broker import Broker
    from django_redisq.store.steps.schedules import Claim

    broker = Broker(get_options("default"))
    now = broker.server_time_ms()
    claim = Claim(expected="", upto=now, missed=0, max_late_ms=60_000, allow_overlap=True, ttl_ms=60_000,
                  task="tests.testapp.tasks.in_order", id_base="p-", ticks=[(now, '{"v":1,"args":["t"],"kwargs":{}}')], priority=-7)
    fired = broker.schedules.fire("default", "every", claim)
    assert fired.ids == [f"p-{now}"] and r.zscore(keys().prioritized, f"p-{now}") is not None
    assert r.hget(keys().task(f"p-{now}"), "prio") == "-7"
