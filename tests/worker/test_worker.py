import json
import threading
import time

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured

from django_redisq.compat import TaskResultStatus
from django_redisq.exceptions import LeaseLost
from django_redisq.worker.settling.settler import SETTLE_TRIES
from django_redisq.worker.worker import Worker
from tests.helpers import ack, blocked_in, drain, keys, message, reap, seed_pending, set_heartbeat_age, wait_for, where_is
from tests.testapp import tasks
from tests.testapp.tasks import EFFECTS


def test_burst_drains_and_exits(r, make_worker):
    results = tasks.add.enqueue_many([([i, 1], {}) for i in range(30)])
    assert make_worker(concurrency=4).run() == 30
    assert {tasks.add.get_result(x.id).return_value for x in results} == set(range(1, 31))
    assert r.llen(keys().processing("x")) == 0


def test_flaky_retries_then_succeeds(r, make_worker):
    res = tasks.flaky.delay("f", 2)
    drain(make_worker, [res])
    assert res.status == TaskResultStatus.SUCCESSFUL and res.return_value == "ok after 3"
    assert len(res.errors) == 2 and res.attempts == 3


def test_exhausted_retries_go_to_the_dead_letter_queue(r, make_worker):
    res = tasks.always_fails.delay()
    drain(make_worker, [res])
    assert where_is(r, res.id) == ["dead"]
    data = r.hgetall(keys().task(res.id))
    assert data["reason"] == "failed" and data["exc"] == "builtins.ValueError"


def test_no_retry_on(r, make_worker):
    res = tasks.not_retryable.delay()
    drain(make_worker, [res])
    assert res.status == TaskResultStatus.FAILED and len(res.errors) == 1
    assert r.hget(keys().task(res.id), "reason") == "not_retryable"


def test_retry_exception(r, make_worker):
    res = tasks.asks_retry.delay("ar")
    drain(make_worker, [res])
    assert res.return_value == "second time" and len(res.errors) == 1


def test_non_json_return_value_fails_without_retry(r, make_worker):
    res = tasks.returns_object.delay()
    drain(make_worker, [res])
    assert res.status == TaskResultStatus.FAILED and len(res.errors) == 1
    assert "not JSON" in res.errors[0].traceback


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("not json at all", "bad_message"),
        ('{"v": 99, "task": "x"}', "unknown_schema"),
        (message(task="os.system", args=["touch /tmp/redisq-pwned"]), "unknown_task"),
        (message(task="tests.testapp.tasks.add", args=[1, 2, 3]), "bad_arguments"),
    ],
)
def test_bad_messages_are_dead_lettered_and_the_worker_goes_on(r, make_worker, raw, reason):
    seed_pending(r, "bad", msg=raw)
    good = tasks.noop.delay(1)
    make_worker().run()
    assert where_is(r, "bad") == ["dead"]
    assert r.hget(keys().task("bad"), "reason") == reason
    assert tasks.noop.get_result(good.id).status == TaskResultStatus.SUCCESSFUL


def test_unregistered_dotted_path_never_runs(r, make_worker, tmp_path):
    target = tmp_path / "pwned"
    seed_pending(r, "bad", msg=message(task="os.system", args=[f"touch {target}"]))
    make_worker().run()
    assert not target.exists()


def test_garbage_id_in_pending(r, make_worker):
    r.lpush(keys().pending, "no-such-task")
    make_worker().run()
    assert where_is(r, "no-such-task") == ["dead"]
    assert r.hget(keys().task("no-such-task"), "reason") == "missing_task"


def test_redelivered_after_success_is_not_run_again(r, broker, make_worker):
    """A lost ack: w1 claimed and ran the task, stalled past the timeout and was reaped (the task went back to pending),
    then acked late. Its 'success' guard makes the redelivered copy finish without running."""
    res = tasks.counted.delay("once")
    set_heartbeat_age(r, "w1", 0, "emails")
    [claimed] = broker.fetch("emails", "w1", 1)
    assert claimed.id == res.id
    set_heartbeat_age(r, "w1", 60_000, "emails")
    assert reap(broker, "emails") == (1, ["w1"]) and where_is(r, res.id, "emails") == ["pending"]
    with pytest.raises(LeaseLost):
        ack(broker, "emails", "w1", res.id, '"ran on w1"')
    make_worker("emails").run()
    assert r.hget(EFFECTS, "once") is None  # the copy never ran
    result = tasks.counted.get_result(res.id)
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == "ran on w1"


def test_max_tasks(r, make_worker):
    tasks.add.enqueue_many([([i, 1], {}) for i in range(10)])
    assert make_worker(max_tasks=3, prefetch=1).run() == 3
    assert r.llen(keys().pending) == 7


def test_queue_order_is_importance(r, make_worker):
    low = tasks.noop.using(queue_name="low").enqueue(1)
    high = tasks.noop.delay(2)
    make_worker("default", "low").run()
    a, b = tasks.noop.get_result(high.id), tasks.noop.get_result(low.id)
    assert a.status == b.status == TaskResultStatus.SUCCESSFUL


def test_graceful_stop_finishes_the_running_task(r, make_worker):
    res = tasks.slow.delay("g", 0.5)
    w = make_worker(burst=False)
    t = threading.Thread(target=w.run)
    t.start()
    deadline = time.time() + 5
    while not r.hget(EFFECTS, "g:start") and time.time() < deadline:
        time.sleep(0.01)
    w.request_stop()
    t.join(10)
    assert not t.is_alive()
    assert tasks.slow.get_result(res.id).status == TaskResultStatus.SUCCESSFUL
    assert r.zscore(keys().workers, w.id) is None  # left the heartbeat set cleanly


def test_stop_hands_back_prefetched_tasks_unstarted(r, make_worker):
    results = [tasks.slow.delay(f"p{i}", 0.3) for i in range(3)]
    w = make_worker(burst=False, concurrency=1, prefetch=3)
    t = threading.Thread(target=w.run)
    t.start()
    deadline = time.time() + 5
    while not r.hget(EFFECTS, "p0:start") and time.time() < deadline:
        time.sleep(0.01)
    w.request_stop()
    t.join(10)
    states = [tasks.slow.get_result(x.id) for x in results]
    assert states[0].status == TaskResultStatus.SUCCESSFUL
    for s in states[1:]:
        assert s.status == TaskResultStatus.READY and s.attempts == 0  # the claim was undone
        assert where_is(r, s.id) == ["pending"]


def test_multiple_queues_each_have_a_fetcher(r, make_worker):
    """A task on the last of three idle queues starts quickly: no polling round-robin."""
    w = make_worker("default", "emails", "low", burst=False)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        # all three fetchers block in BLMOVE (seen by Redis), so the task is on a queue nobody is polling just now
        assert wait_for(lambda: blocked_in(r, "blmove") >= 3, timeout=10)
        start = time.monotonic()
        res = tasks.noop.using(queue_name="low").enqueue(1)
        while tasks.noop.get_result(res.id).status != TaskResultStatus.SUCCESSFUL:
            assert time.monotonic() - start < 2
            time.sleep(0.002)
        # a round-robin poll would wait out the other queues' 1 s blocks; a blocked fetcher of its own starts it in ms
        assert time.monotonic() - start < 0.9  # under one other queue's block (ms measured): room for a loaded machine
    finally:
        w.request_stop()
        t.join(10)


def test_heartbeat_publishes_worker_info(r, make_worker):
    w = make_worker(burst=False, name="hb-worker")
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert wait_for(lambda: r.get(keys().worker_info(w.id)), timeout=10)  # the first beat registers it
        assert w.id.startswith("hb-worker.") and w.id != "hb-worker"  # unique per process
        info = json.loads(r.get(keys().worker_info(w.id)))
        assert info["name"] == "hb-worker" and info["id"] == w.id and info["queues"] == ["default", "emails", "low"]
    finally:
        w.request_stop()
        t.join(10)


def test_lost_fetch_reply_is_handed_back(r, make_worker):
    """An id in our processing list that we never heard of (lost reply) is released by the sweep."""
    seed_pending(r, "t0")
    w = make_worker(burst=False, name="sweeper")
    w.heartbeat.beat()
    w.broker.fetch("default", w.id, 1)  # claimed behind the worker's back
    w.heartbeat.sweep("default")
    assert where_is(r, "t0") == ["processing:" + w.id]  # first sighting: only a suspect
    w.heartbeat.sweep("default")
    assert where_is(r, "t0") == ["pending"]


def test_bad_worker_arguments():
    with pytest.raises(ImproperlyConfigured, match="not in TASKS"):
        Worker(["nope"])
    with pytest.raises(ValueError, match="worker name"):
        Worker(name="has space")
    with pytest.raises(ValueError, match="concurrency"):
        Worker(concurrency=0)


def test_db_connections_are_closed_around_each_task(r, make_worker, monkeypatch):
    import django_redisq.worker.running.runner as runner_mod

    calls = []
    real = runner_mod.close_old_connections
    monkeypatch.setattr(runner_mod, "close_old_connections", lambda: (calls.append(threading.get_ident()), real()))
    tasks.add.enqueue_many([([i, 1], {}) for i in range(3)])
    make_worker().run()
    assert len(calls) == 6  # before and after each of the three tasks


def test_a_dead_letter_can_be_replayed_again_and_again(r, make_worker, broker):
    """Replay restarts the delivery count, so a replayed task always runs (regression)."""
    res = tasks.always_fails.delay("again")
    for round_ in range(8):
        drain(make_worker, [res])
        assert r.hget(keys().task(res.id), "reason") == "failed", round_
        assert broker.operator.replay("default", [res.id]) == 1
    assert len(tasks.always_fails.get_result(res.id).errors) == 16  # two attempts per round, all kept


def test_a_settle_step_that_redis_refuses_is_not_retried_forever(r, make_worker, monkeypatch, caplog):
    """A script error is an answer, not an outage: tried SETTLE_TRIES times, not retried for ever; the task ends as a dead letter that says so
    (handing it back would run it again and again: tests/worker/test_every_task_ends.py)."""
    res = tasks.noop.delay(1)
    w = make_worker(burst=False, name="refused")
    calls = []

    def refuse(*args, **kwargs):
        calls.append(1)
        raise redis.ResponseError("ERR simulated script error")

    monkeypatch.setattr(w.broker, "ack_many", refuse)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        assert wait_for(lambda: where_is(r, res.id) == ["dead"], timeout=10), (where_is(r, res.id), caplog.messages)
        assert r.hget(keys().task(res.id), "reason") == "settle_failed"
        assert "simulated script error" in r.hget(keys().task(res.id), "error")
        assert not any("retrying" in m for m in caplog.messages), caplog.messages
        assert len(calls) == SETTLE_TRIES  # tried a few times (a passing bug), not retried in a loop
    finally:
        w.request_stop()
        t.join(10)
