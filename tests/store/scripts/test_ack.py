import pytest

from django_redisq.exceptions import LeaseLost
from django_redisq.store.steps.replies import DONE
from tests.helpers import ack, keys, seed_processing, where_is


def test_ack_finishes_and_a_redelivered_copy_does_not_run(r, broker):
    """The finished hash is the success record: the guard is left to lapse with its lease (one write less per task,
    and no second key kept for RESULT_TTL), and a copy of the id that comes back is acked without running."""
    seed_processing(r, "t0", "w1")
    ack(broker, "default", "w1", "t0", "42")
    assert where_is(r, "t0") == ["finished"]
    data = r.hgetall(keys().task("t0"))
    assert data["result"] == "42" and data["finished_at"]
    assert 0 < r.pttl(keys().status("t0")) <= 60_000  # the claim's lease, not extended
    assert r.ttl(keys().task("t0")) > 3600
    assert r.get(keys().counter("processed")) == "1"
    r.zadd(keys().workers, {"w2": 1})  # another worker, registered
    for lapsed in (False, True):  # a stray copy of the id (a producer's duplicate push), while the claim is there and after
        if lapsed:
            r.delete(keys().status("t0"))
        r.lpush(keys().pending, "t0")
        [d] = broker.fetch("default", "w2", 1)
        assert d.code == DONE and r.hget(keys().task("t0"), "state") == "finished"
    assert r.get(keys().counter("processed")) == "1" and r.llen(keys().processing("w2")) == 0


def test_a_plain_ack_writes_the_hash_without_reading_it(r, broker):
    """fetch.lua called the task plain (no idempotency key, no slot): ack.lua's HSET is its only touch of the hash."""
    seed_processing(r, "t0", "w1")
    before = r.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0)
    assert broker.ack_many("default", "w1", [("t0", "7")], (), {"t0"}) == []
    assert r.info("commandstats").get("cmdstat_hmget", {}).get("calls", 0) == before
    assert where_is(r, "t0") == ["finished"] and r.hget(keys().task("t0"), "result") == "7"


def test_a_batch_at_the_tail_leaves_the_list_in_one_trim_and_the_rest_one_by_one(r, broker):
    for i in range(6):  # t0 fetched first: at the tail
        seed_processing(r, f"t{i}", "w1")
    assert broker.ack_many("default", "w1", [("t0", "0"), ("t1", "1"), ("t4", "4")]) == []
    assert r.lrange(keys().processing("w1"), 0, -1) == ["t5", "t3", "t2"]
    assert [where_is(r, f"t{i}") for i in (0, 1, 4)] == [["finished"]] * 3
    assert r.get(keys().counter("processed")) == "3"


def test_ack_without_ownership_is_refused_but_marks_success(r, broker):
    seed_processing(r, "t0", "w2")
    with pytest.raises(LeaseLost):
        ack(broker, "default", "w1", "t0", "42")
    assert where_is(r, "t0") == ["processing:w2"]  # not moved
    assert r.get(keys().status("t0")) == "success"  # the redelivered copy will not run again
    assert r.get(keys().counter("processed")) is None


def test_ack_many_pipelines(r, broker):
    for i in range(3):
        seed_processing(r, f"t{i}", "w1")
    lost = broker.ack_many("default", "w1", [("t0", "1"), ("t1", "2"), ("nope", "3")])
    assert lost == ["nope"]
    assert r.llen(keys().processing("w1")) == 1


def test_ack_extends_the_idempotency_key(r, broker):
    seed_processing(r, "t0", "w1")
    r.hset(keys().task("t0"), "idem", "order-1")
    r.set(keys().idem("order-1"), "t0")
    ack(broker, "default", "w1", "t0", "null")
    assert r.ttl(keys().idem("order-1")) > 3600
