"""A key of the wrong type never makes a script fail half-way (Redis does not roll back).

Each scenario plants one key of the wrong type, runs one script, and checks the
script answered (no WRONGTYPE error), the task is where it should be, and the
bad key was set aside to ``<key>:corrupt`` with a TTL.
"""

import json

import pytest

from django_redisq.exceptions import LeaseLost
from django_redisq.store.keys import QueueKeys
from django_redisq.store.steps.replies import NewTask
from tests.helpers import ack, keys, message, redis_ms, seed_dead, seed_processing, seed_scheduled, where_is

ERR = {"exc": "builtins.ValueError", "msg": "boom", "tb": "Traceback...", "at": 1}
K = keys()


def plant(r, key: str, kind: str) -> None:
    r.delete(key)
    {"string": lambda: r.set(key, "not-a-number"), "list": lambda: r.rpush(key, "x"),
     "hash": lambda: r.hset(key, "x", "1"), "zset": lambda: r.zadd(key, {"x": 1})}[kind]()


def assert_set_aside(r, key: str) -> None:
    aside = K.corrupt(key)
    assert r.exists(aside), f"{key} was not set aside"
    assert r.pttl(aside) > 0, f"{aside} has no TTL"


def seed_held(r, task_id: str = "t0", idem: str = "k1") -> None:
    seed_processing(r, task_id, "w1")
    r.hset(K.task(task_id), "idem", idem)
    r.set(K.idem(idem), task_id)


# -- ack.lua -----------------------------------------------------------------

@pytest.mark.parametrize(("key", "kind"), [
    (K.status("t0"), "list"), (K.idem("k1"), "hash"), (K.counter("processed"), "string"),
    (K.counter("processed"), "hash"), (K.dead, "string"),
], ids=["guard-a-list", "idem-a-hash", "counter-not-a-number", "counter-a-hash", "dead-a-string"])
def test_ack_with_a_key_of_the_wrong_type(r, broker, key, kind):
    seed_held(r)
    plant(r, key, kind)
    ack(broker, "default", "w1", "t0", "42")
    assert where_is(r, "t0") == ["finished"] and r.hget(K.task("t0"), "result") == "42"
    if key != K.status("t0"):  # the ack does not touch the guard (it lapses): a bad one is left to lapse or be replaced
        assert_set_aside(r, key)
    if key == K.counter("processed"):
        assert r.get(key) == "1"


def test_ack_of_a_task_whose_hash_is_not_a_hash_dead_letters_it(r, broker):
    seed_processing(r, "t0", "w1")
    plant(r, K.task("t0"), "list")
    ack(broker, "default", "w1", "t0", "42")
    assert where_is(r, "t0") == ["dead"]
    data = r.hgetall(K.task("t0"))
    assert data["reason"] == "corrupt" and data["result"] == "42" and "list" in data["error"]
    assert json.loads(data["errors"])[0]["msg"] == data["error"]
    assert_set_aside(r, K.task("t0"))


def test_ack_when_the_processing_list_is_not_a_list(r, broker):
    seed_held(r)
    plant(r, K.processing("w1"), "string")
    assert broker.ack_many("default", "w1", [("t0", "1")]) == ["t0"]  # it cannot be held there
    assert_set_aside(r, K.processing("w1"))


# -- retry.lua ---------------------------------------------------------------

@pytest.mark.parametrize(("key", "kind"), [
    (K.status("t0"), "hash"), (K.scheduled, "string"), (K.counter("failed"), "string"), (K.dead, "list"),
], ids=["guard-a-hash", "scheduled-a-string", "counter-not-a-number", "dead-a-list"])
def test_retry_with_a_key_of_the_wrong_type(r, broker, key, kind):
    seed_held(r)
    plant(r, key, kind)
    broker.retry("default", "w1", "t0", 0, ERR)
    assert where_is(r, "t0") == ["scheduled"] and r.hget(K.task("t0"), "failures") == "1"
    assert_set_aside(r, key)


def test_retry_of_a_task_whose_hash_is_not_a_hash_dead_letters_it(r, broker):
    seed_processing(r, "t0", "w1")
    plant(r, K.task("t0"), "string")
    broker.retry("default", "w1", "t0", 0, ERR)
    assert where_is(r, "t0") == ["dead"] and r.hget(K.task("t0"), "reason") == "corrupt"
    assert_set_aside(r, K.task("t0"))
    assert r.pttl(K.corrupt(K.task("t0"))) > 6 * 86400_000  # kept as long as the dead letter


# -- bury.lua ----------------------------------------------------------------

@pytest.mark.parametrize(("key", "kind"), [
    (K.status("t0"), "list"), (K.dead, "string"), (K.counter("dead_count"), "hash"),
], ids=["guard-a-list", "dead-a-string", "counter-a-hash"])
def test_bury_with_a_key_of_the_wrong_type(r, broker, key, kind):
    seed_held(r)
    plant(r, key, kind)
    broker.bury("default", "w1", "t0", ERR, "failed", failed=True)
    assert where_is(r, "t0") == ["dead"] and r.hget(K.task("t0"), "reason") == "failed"
    assert_set_aside(r, key)


def test_bury_trims_a_dead_letter_whose_hash_is_not_a_hash(r, broker):
    seed_dead(r, "ancient", died_at=1)
    plant(r, K.task("ancient"), "zset")
    seed_processing(r, "t0", "w1")
    assert broker.bury("default", "w1", "t0", ERR, "failed", failed=True) == 1
    assert not r.exists(K.task("ancient"))


# -- enqueue.lua -------------------------------------------------------------

@pytest.mark.parametrize(("key", "kind"), [
    (K.pending, "string"), (K.scheduled, "hash"), (K.idem("order-1"), "list"), (K.task("id1"), "string"),
], ids=["pending-a-string", "scheduled-a-hash", "idem-a-list", "task-key-a-string"])
def test_enqueue_with_a_key_of_the_wrong_type(r, broker, key, kind):
    plant(r, key, kind)
    delay = 5000 if key == K.scheduled else 0
    [out] = broker.enqueue("default", [NewTask("id1", message(), "p", delay, "order-1")])
    assert out.duplicate_of is None
    assert where_is(r, "id1") == ["scheduled" if delay else "pending"]
    assert r.hget(K.task("id1"), "msg") == message() and r.get(K.idem("order-1")) == "id1"
    assert_set_aside(r, key)


# -- promote.lua -------------------------------------------------------------

def test_promote_with_a_task_key_of_the_wrong_type_moves_it_without_writing_it(r, broker):
    seed_scheduled(r, "t0", -10)
    plant(r, K.task("t0"), "list")
    assert broker.promote("default")[0] == 1
    assert where_is(r, "t0") == ["pending"]  # fetch reports it CORRUPT, the worker dead-letters it
    assert r.type(K.task("t0")) == "list"


@pytest.mark.parametrize(("key", "kind"), [(K.scheduled, "string"), (K.pending, "hash")],
                         ids=["scheduled-a-string", "pending-a-hash"])
def test_promote_with_a_queue_key_of_the_wrong_type(r, broker, key, kind):
    seed_scheduled(r, "t0", -10)
    plant(r, key, kind)
    broker.promote("default")
    assert_set_aside(r, key)


# -- replay.lua, purge.lua ---------------------------------------------------

def test_replay_with_keys_of_the_wrong_type(r, broker):
    seed_dead(r, "t0")
    seed_dead(r, "t1")
    r.hset(K.task("t0"), mapping={"idem": "k1", "replayed": "not-a-number"})
    plant(r, K.idem("k1"), "list")
    plant(r, K.pending, "string")
    plant(r, K.task("t1"), "list")
    assert broker.operator.replay("default", ["t0", "t1"]) == 1
    assert where_is(r, "t0") == ["pending"] and r.hget(K.task("t0"), "replayed") == "1"
    assert r.get(K.idem("k1")) == "t0"
    assert where_is(r, "t1") == ["dead"]  # nothing to run: it stays visible
    assert_set_aside(r, K.pending)
    assert_set_aside(r, K.idem("k1"))


def test_replay_when_the_dead_set_is_not_a_zset(r, broker):
    plant(r, K.dead, "list")
    assert broker.operator.replay("default", ["x"]) == 0
    assert_set_aside(r, K.dead)


def test_purge_with_keys_of_the_wrong_type(r, broker):
    seed_dead(r, "t0")
    seed_dead(r, "t1")
    r.hset(K.task("t0"), "idem", "k1")
    plant(r, K.idem("k1"), "hash")
    plant(r, K.task("t1"), "string")
    assert broker.operator.purge("default", ["t0", "t1"]) == 2
    assert not r.exists(K.task("t0"), K.task("t1"))
    plant(r, K.dead, "string")
    assert broker.operator.purge("default", ["t0"]) == 0
    assert_set_aside(r, K.dead)


# -- move_out.lua, move_in.lua ----------------------------------------------

def test_a_move_into_a_queue_whose_keys_have_the_wrong_type(r, broker):
    seed_dead(r, "t0")
    emails = QueueKeys("emails")
    plant(r, emails.pending, "string")
    plant(r, emails.task("t0"), "list")  # not an earlier copy: no move writes anything but a hash
    [(task_id, code, fields)] = broker.operator.move_out("default", "emails", ["t0"])
    assert code == 1
    assert broker.operator.move_in("emails", "default", [(task_id, fields[0], fields)]) == [1]
    assert where_is(r, "t0", "emails") == ["pending"]
    assert_set_aside(r, emails.pending)
    assert_set_aside(r, emails.task("t0"))


def test_a_move_out_of_a_queue_whose_dead_set_is_not_a_zset(r, broker):
    plant(r, K.dead, "hash")
    assert broker.operator.move_out("default", "emails", ["t0"]) == [("t0", 0, [""] * 9)]
    assert_set_aside(r, K.dead)


def test_redis_time_is_used_for_a_corrupt_dead_letter(r, broker):
    seed_processing(r, "t0", "w1")
    plant(r, K.task("t0"), "string")
    before = redis_ms(r)
    ack(broker, "default", "w1", "t0", "1")
    assert before <= int(r.hget(K.task("t0"), "died_at")) <= redis_ms(r)


def test_a_bury_that_lost_the_lease_leaves_a_corrupt_hash_to_its_holder(r, broker):
    seed_processing(r, "t0", "w2")
    plant(r, K.task("t0"), "string")
    with pytest.raises(LeaseLost):
        broker.bury("default", "w1", "t0", ERR, "failed", failed=True)
    assert r.type(K.task("t0")) == "string" and where_is(r, "t0") == ["processing:w2"]
