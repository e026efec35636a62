import pytest

from django_redisq.exceptions import LeaseLost
from tests.helpers import ack, keys, seed_processing, where_is


def test_ack_finishes_and_arms_the_guard(r, broker):
    seed_processing(r, "t0", "w1")
    ack(broker, "default", "w1", "t0", "42")
    assert where_is(r, "t0") == ["finished"]
    data = r.hgetall(keys().task("t0"))
    assert data["result"] == "42" and data["finished_at"]
    assert r.get(keys().status("t0")) == "success"
    assert r.ttl(keys().status("t0")) > 3600
    assert r.ttl(keys().task("t0")) > 3600
    assert r.get(keys().counter("processed")) == "1"


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
