"""cancel.lua, and the cancel requests that ack, bury, retry, reap and release settle."""

import json
import re
from importlib import resources

import pytest
import redis
from redis.cluster import RedisCluster

from django_redisq.compat import TaskResultStatus, task_backends
from django_redisq.store.steps.replies import CANCELLED, CANCELLED_EXC, cancelled_error
from tests.helpers import ack, keys, reap, redis_ms, seed_dead, seed_hash, seed_pending, seed_processing, seed_scheduled, set_heartbeat_age, where_is

K = keys()
ERR = {"exc": "builtins.ValueError", "msg": "boom", "tb": "Traceback...", "at": 1}
EXC = "django_redisq.exceptions.TaskCancelled"


def register(r, worker: str = "w1") -> None:
    r.zadd(K.workers, {worker: redis_ms(r)})


def assert_cancelled(r, task_id: str, who: str, failures: str = "0") -> dict:
    assert where_is(r, task_id) == ["dead"]
    data = r.hgetall(K.task(task_id))
    assert data["state"] == "dead" and data["reason"] == "cancelled" and data["exc"] == EXC
    assert data["error"] == f"cancelled by {who}" and data["failures"] == failures
    last = json.loads(data["errors"])[-1]
    assert last["exc"] == EXC and last["msg"] == f"cancelled by {who}" and last["at"] == int(data["died_at"])
    assert r.ttl(K.task(task_id)) == -1
    assert r.hget(K.cancels, task_id) is None
    return data


def test_the_exception_path_is_the_same_in_lua_and_python():
    lua = resources.files("django_redisq.store.scripts").joinpath("lib", "cancel.lua").read_text()
    assert re.search(r"CANCELLED_EXC = '([^']+)'", lua).group(1) == CANCELLED_EXC == EXC  # type: ignore[union-attr]
    assert re.search(r"CANCELLED = '([^']+)'", lua).group(1) == CANCELLED  # type: ignore[union-attr]


def test_a_pending_task_is_dead_lettered_at_once(r, broker):
    seed_pending(r, "other")
    seed_pending(r, "t0")
    before = redis_ms(r)
    assert broker.operator.cancel("default", ["t0"], "cli") == ["cancelled"]
    data = assert_cancelled(r, "t0", "cli")
    assert before <= int(data["died_at"]) <= redis_ms(r)  # Redis time
    assert r.lrange(K.pending, 0, -1) == ["other"]
    assert r.get(K.counter("dead_count")) == "1"
    assert r.get(K.counter("dead_count", int(data["died_at"]) // 60000)) == "1"


def test_a_scheduled_task_is_dead_lettered_at_once(r, broker):
    seed_scheduled(r, "t0", 60_000)
    assert broker.operator.cancel("default", ["t0"], "admin:alice") == ["cancelled"]
    assert_cancelled(r, "t0", "admin:alice")
    assert r.zcard(K.scheduled) == 0


def test_get_result_reads_failed_with_the_cancel_error(r, broker):
    seed_pending(r, "t0")
    broker.operator.cancel("default", ["t0"], "api")
    result = task_backends["default"].get_result("t0")
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class_path == EXC and "cancelled by api" in result.errors[-1].traceback
    assert result.finished_at is not None


def test_a_running_task_gets_a_request_its_worker_reads(r, broker):
    seed_processing(r, "t0", "w1")
    register(r)
    assert broker.operator.cancel_requests("default") == {}
    before = redis_ms(r)
    assert broker.operator.cancel("default", ["t0"], "cli") == ["requested"]
    assert where_is(r, "t0") == ["processing:w1"] and r.hget(K.task("t0"), "state") == "running"
    at, who = r.hget(K.cancels, "t0").split("|")
    assert who == "cli" and before <= int(at) <= redis_ms(r)
    assert broker.operator.cancel_requests("default") == {"t0": "cli"}
    # asked again: still requested, the first request is kept
    assert broker.operator.cancel("default", ["t0"], "api") == ["requested"]
    assert broker.operator.cancel_requests("default") == {"t0": "cli"}


def test_an_id_a_worker_moved_but_did_not_claim_yet_is_found_through_the_registered_workers(r, broker):
    seed_hash(r, "t0", "pending")  # BLMOVE took it from pending; fetch.lua has not run yet
    r.lpush(K.processing("w2"), "t0")
    register(r, "w1")
    register(r, "w2")
    assert broker.operator.cancel("default", ["t0"], "cli") == ["requested"]
    assert broker.operator.cancel_requests("default") == {"t0": "cli"}


def test_a_running_task_of_a_worker_named_by_the_hash_but_not_registered(r, broker):
    seed_processing(r, "t0", "w1")  # its hash names w1; the worker is reaped or not registered yet
    assert broker.operator.cancel("default", ["t0"], "cli") == ["requested"]


@pytest.mark.parametrize("state", ["finished", "dead"])
def test_a_finished_or_dead_task_is_left_alone(r, broker, state):
    if state == "dead":
        seed_dead(r, "t0")
    else:
        seed_hash(r, "t0", "finished", result="3")
    before = r.hgetall(K.task("t0"))
    assert broker.operator.cancel("default", ["t0"], "cli") == ["finished"]
    assert r.hgetall(K.task("t0")) == before and not r.exists(K.cancels)


def test_an_unknown_id_is_missing(r, broker):
    assert broker.operator.cancel("default", ["nope"], "cli") == ["missing"]
    assert r.keys("*") == []  # nothing written


def test_a_task_whose_data_is_not_a_hash_is_reported_missing_and_left_for_its_worker(r, broker):
    r.set(K.task("t0"), "garbage")
    r.lpush(K.pending, "t0")
    assert broker.operator.cancel("default", ["t0"], "cli") == ["missing"]
    assert r.get(K.task("t0")) == "garbage" and r.lrange(K.pending, 0, -1) == ["t0"]


def test_a_batch_mixing_every_state_in_one_call(r, broker):
    seed_pending(r, "p")
    seed_scheduled(r, "s", 5_000)
    seed_processing(r, "run", "w1")
    register(r)
    seed_hash(r, "fin", "finished")
    seed_dead(r, "dead")
    ids = ["p", "s", "run", "fin", "dead", "nope", "p"]
    assert broker.operator.cancel("default", ids, "cli") == ["cancelled", "cancelled", "requested", "finished", "finished", "missing", "finished"]
    assert where_is(r, "p") == ["dead"] and where_is(r, "s") == ["dead"] and where_is(r, "run") == ["processing:w1"]
    assert r.get(K.counter("dead_count")) == "2"


def test_a_large_batch_goes_in_several_atomic_calls(r, broker):
    for i in range(250):
        seed_pending(r, f"t{i}")
    assert broker.operator.cancel("default", [f"t{i}" for i in range(250)], "cli") == ["cancelled"] * 250
    assert r.llen(K.pending) == 0 and r.zcard(K.dead) == 250


def _queue_node(r) -> dict:
    """On a cluster, statistics are per node: those of the queue's."""
    return {"target_nodes": r.get_node_from_key(K.pending)} if isinstance(r, RedisCluster) else {}


def test_a_call_walks_pending_within_its_budget_and_the_rest_is_sent_again(r, broker, monkeypatch):
    from django_redisq.store.steps import operator as broker_module

    monkeypatch.setattr(broker_module, "CANCEL_SCAN", 10)
    for i in range(30):
        seed_pending(r, f"t{i}")  # t29 is at the head: the farthest from the tail, where the walk starts
    seed_scheduled(r, "s", 5_000)
    r.config_resetstat(**_queue_node(r))
    ids = ["t29", "t28", "s", "t0", "nope", "t27"]
    assert broker.operator.cancel("default", ids, "cli") == ["cancelled", "cancelled", "cancelled", "cancelled", "missing", "cancelled"]
    stats = r.info("commandstats", **_queue_node(r))["cmdstat_evalsha"]
    assert stats["calls"] - stats["failed_calls"] == 4  # t29, then t28 and s, then t0 and nope, then t27: each far one waits for a call
    assert r.llen(K.pending) == 26 and r.zcard(K.dead) == 5
    r.config_resetstat(**_queue_node(r))
    assert broker.operator.cancel("default", ["t1", "t2", "t3"], "cli") == ["cancelled"] * 3  # next to run: within one budget
    stats = r.info("commandstats", **_queue_node(r))["cmdstat_evalsha"]
    assert stats["calls"] - stats["failed_calls"] == 1


def test_cancelling_trims_the_dead_set_as_bury_does(r, broker):
    seed_dead(r, "ancient", died_at=1)
    seed_pending(r, "t0")
    broker.operator.cancel("default", ["t0"], "cli")
    assert where_is(r, "ancient") == [] and not r.exists(K.task("ancient"))
    assert where_is(r, "t0") == ["dead"]


def test_the_dead_letter_keeps_its_idempotency_key_as_a_buried_one_does_until_purged(r, broker):
    seed_pending(r, "t0", idem="order-1")
    r.set(K.idem("order-1"), "t0")
    broker.operator.cancel("default", ["t0"], "cli")
    assert r.get(K.idem("order-1")) == "t0" and r.ttl(K.idem("order-1")) == -1  # like bury.lua: held by the dead letter
    assert broker.operator.purge("default", ["t0"]) == 1
    assert not r.exists(K.idem("order-1"))  # freed with it


def test_a_cancelled_task_can_be_replayed(r, broker):
    seed_pending(r, "t0")
    broker.operator.cancel("default", ["t0"], "cli")
    assert broker.operator.replay("default", ["t0"]) == 1
    assert where_is(r, "t0") == ["pending"] and r.hget(K.task("t0"), "reason") is None


# -- the scripts that settle a requested task ------------------------------

def request(r, broker, task_id: str = "t0", worker: str = "w1") -> None:
    seed_processing(r, task_id, worker)
    register(r, worker)
    assert broker.operator.cancel("default", [task_id], "admin:bob") == ["requested"]


def test_bury_by_the_worker_that_stopped_it_clears_the_request(r, broker):
    request(r, broker)
    broker.bury("default", "w1", "t0", cancelled_error("admin:bob"), reason=CANCELLED, failed=False)
    assert_cancelled(r, "t0", "admin:bob")
    assert broker.operator.cancel_requests("default") == {} and not r.exists(K.status("t0"))


def test_ack_clears_the_requests_of_its_batch(r, broker):
    request(r, broker, "t0")
    request(r, broker, "t1")
    request(r, broker, "t2")
    assert broker.ack_many("default", "w1", [("t0", "1"), ("t1", "2")]) == []
    assert broker.operator.cancel_requests("default") == {"t2": "admin:bob"}
    assert where_is(r, "t0") == ["finished"]


def test_a_late_ack_after_a_lost_lease_clears_the_request_too(r, broker):
    request(r, broker, "t0", "w2")
    assert broker.ack_many("default", "w1", [("t0", "1")]) == ["t0"]  # 'success' guard: no copy runs again
    assert broker.operator.cancel_requests("default") == {}


def test_ack_without_requests_creates_no_key(r, broker):
    seed_processing(r, "t0", "w1")
    ack(broker, "default", "w1", "t0", "1")
    assert not r.exists(K.cancels)


def test_retry_of_a_requested_task_buries_it_as_cancelled(r, broker):
    request(r, broker)
    assert broker.retry("default", "w1", "t0", 1000, ERR) is False
    data = assert_cancelled(r, "t0", "admin:bob", failures="1")  # the attempt did fail
    assert [e["exc"] for e in json.loads(data["errors"])] == ["builtins.ValueError", EXC]
    assert r.zcard(K.scheduled) == 0 and not r.exists(K.status("t0"))


def test_retry_without_a_request_still_retries(r, broker):
    request(r, broker, "other")
    seed_processing(r, "t0", "w1")
    assert broker.retry("default", "w1", "t0", 1000, ERR) is True
    assert where_is(r, "t0") == ["scheduled"] and broker.operator.cancel_requests("default") == {"other": "admin:bob"}


def test_reap_buries_a_requested_task_and_gives_back_the_rest(r, broker):
    request(r, broker, "t0", "dead-w")
    seed_processing(r, "t1", "dead-w")
    set_heartbeat_age(r, "dead-w", 60_000)
    tasks, workers = reap(broker, "default")
    assert (tasks, workers) == (2, ["dead-w"])
    assert_cancelled(r, "t0", "admin:bob")
    assert where_is(r, "t1") == ["pending"] and r.hget(K.task("t1"), "state") == "pending"
    assert not r.exists(K.status("t0")) and not r.exists(K.status("t1"))


def test_release_of_unstarted_tasks_buries_a_requested_one(r, broker):
    broker.heartbeat(["default"], "w1", {})
    seed_pending(r, "t0")
    seed_pending(r, "t1")
    broker.fetch("default", "w1", 2)
    assert broker.operator.cancel("default", ["t0"], "cli") == ["requested"]
    assert broker.release("default", "w1", ["t0", "t1"]) == 2
    data = assert_cancelled(r, "t0", "cli")
    assert data["deliveries"] == "0" and not r.exists(K.status("t0"))  # the claim is undone
    assert where_is(r, "t1") == ["pending"]


def test_release_of_everything_on_exit_buries_a_requested_one(r, broker):
    request(r, broker)
    seed_processing(r, "t1", "w1")
    assert broker.release("default", "w1") == 2
    assert_cancelled(r, "t0", "admin:bob")
    assert where_is(r, "t1") == ["pending"]


def test_fetch_drops_the_request_of_an_id_it_finds_already_successful(r, broker):
    seed_hash(r, "t0", "pending")  # a late ack of a reaped worker wrote 'success'; another worker's BLMOVE took the copy
    r.set(K.status("t0"), "success")
    broker.heartbeat(["default"], "w2", {})
    r.lpush(K.processing("w2"), "t0")
    assert broker.operator.cancel("default", ["t0"], "cli") == ["requested"]
    assert [d.code for d in broker.fetch("default", "w2", 0, moved_id="t0")] == [2]  # DONE: it will not run
    assert where_is(r, "t0") == ["finished"] and broker.operator.cancel_requests("default") == {}


# -- a cancels key of the wrong type --------------------------------------------

def plant(r) -> None:
    r.set(K.cancels, "not a hash")


def assert_set_aside(r) -> None:
    assert r.get(K.corrupt(K.cancels)) == "not a hash" and r.pttl(K.corrupt(K.cancels)) > 0


def test_cancel_sets_a_wrong_cancels_key_aside(r, broker):
    seed_processing(r, "t0", "w1")
    plant(r)
    assert broker.operator.cancel_requests("default") == {}  # the worker's poll does not fail
    assert broker.operator.cancel("default", ["t0"], "cli") == ["requested"]
    assert_set_aside(r)
    assert broker.operator.cancel_requests("default") == {"t0": "cli"}


@pytest.mark.parametrize("step", ["ack", "bury", "retry"])
def test_settling_sets_a_wrong_cancels_key_aside(r, broker, step):
    seed_processing(r, "t0", "w1")
    plant(r)
    {"ack": lambda: ack(broker, "default", "w1", "t0", "1"),
     "bury": lambda: broker.bury("default", "w1", "t0", ERR, "failed", failed=True),
     "retry": lambda: broker.retry("default", "w1", "t0", 10, ERR)}[step]()
    assert where_is(r, "t0") == [{"ack": "finished", "bury": "dead", "retry": "scheduled"}[step]]
    assert_set_aside(r)


@pytest.mark.parametrize("step", ["reap", "release"])
def test_reap_and_release_refuse_a_wrong_cancels_key_as_they_refuse_other_structural_keys(r, broker, step):
    seed_processing(r, "t0", "dead-w")
    set_heartbeat_age(r, "dead-w", 60_000)
    plant(r)
    with pytest.raises(redis.ResponseError, match=r"WRONGTYPE .*:cancels is a string, expected a hash"):
        reap(broker, "default") if step == "reap" else broker.release("default", "dead-w")
    assert where_is(r, "t0") == ["processing:dead-w"]  # nothing moved
