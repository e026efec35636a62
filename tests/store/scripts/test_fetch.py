import pytest

from django_redisq.exceptions import Fenced
from django_redisq.store.steps.replies import BUSY, CORRUPT, DONE, NOMSG, RUN
from tests.helpers import keys, seed_pending, where_is


@pytest.fixture(autouse=True)
def _registered(broker):
    """Fetching workers are registered (Worker.run heartbeats before its first fetch)."""
    for w in ("w1", "w2"):
        broker.heartbeat(["default", "emails"], w, {})


def test_fetch_claims_in_fifo_order(r, broker):
    for i in range(3):
        seed_pending(r, f"t{i}")
    got = broker.fetch("default", "w1", 2)
    assert [(d.id, d.code, d.deliveries) for d in got] == [("t0", RUN, 1), ("t1", RUN, 1)]
    assert r.lrange(keys().processing("w1"), 0, -1) == ["t1", "t0"]
    assert r.get(keys().status("t0")) == "running:w1"
    assert 0 < r.pttl(keys().status("t0")) <= 10_000
    data = r.hgetall(keys().task("t0"))
    assert data["state"] == "running" and data["workers"] == "w1" and data["started_at"]


def test_fetch_with_nothing_pending(r, broker):
    assert broker.fetch("default", "w1", 5) == []


def test_fetch_after_blmove(r, broker):
    seed_pending(r, "t0")
    moved = broker.wait("default", "w1", 0.1)
    assert moved == "t0" and where_is(r, "t0") == ["processing:w1"]
    [d] = broker.fetch("default", "w1", 0, moved_id=moved)
    assert d.code == RUN and r.get(keys().status("t0")) == "running:w1"


def test_already_successful_is_not_run(r, broker):
    seed_pending(r, "t0")
    r.set(keys().status("t0"), "success")
    [d] = broker.fetch("default", "w1", 1)
    assert d.code == DONE
    assert where_is(r, "t0") == ["finished"]
    assert r.ttl(keys().task("t0")) > 0


def test_guard_held_by_another_worker_means_busy(r, broker):
    seed_pending(r, "t0")
    r.set(keys().status("t0"), "running:w2", px=60_000)
    [d] = broker.fetch("default", "w1", 1)
    assert d.code == BUSY
    assert where_is(r, "t0") == ["scheduled"]


def test_unknown_id_is_left_for_burial(r, broker):
    r.lpush(keys().pending, "garbage")
    [d] = broker.fetch("default", "w1", 1)
    assert d.code == NOMSG and where_is(r, "garbage") == ["processing:w1"]


def test_a_second_delivery_keeps_the_history(r, broker):
    seed_pending(r, "t0", deliveries=1, workers="w0", started_at=5)
    [d] = broker.fetch("default", "w1", 1)
    assert d.deliveries == 2 and d.workers == "w0,w1" and d.started_at == 5


def test_fetch_by_a_reaped_worker_is_fenced(r, broker):
    """A worker that was reaped (paused past WORKER_TIMEOUT) takes nothing until it registers again,
    and an id its late BLMOVE put in its list goes back to pending instead of being stranded there."""
    seed_pending(r, "t0")
    seed_pending(r, "t1")
    assert broker.wait("default", "w1", 0.1) == "t0"
    r.zrem(keys().workers, "w1")  # what reap.lua does
    with pytest.raises(Fenced):
        broker.fetch("default", "w1", 5, moved_id="t0")
    assert r.lrange(keys().pending, 0, -1) == ["t1", "t0"]  # t0 is next again
    assert r.llen(keys().processing("w1")) == 0 and r.get(keys().status("t0")) is None
    assert r.hget(keys().task("t0"), "deliveries") == "0"
    broker.heartbeat(["default"], "w1", {})
    assert sorted(d.id for d in broker.fetch("default", "w1", 5)) == ["t0", "t1"]


def test_a_paused_queue_gives_nothing_and_the_moved_id_keeps_its_place(r, broker):
    """While P:paused exists fetch takes nothing; an id a BLMOVE already moved goes back to be taken next."""
    from django_redisq.exceptions import QueuePaused

    seed_pending(r, "t0")
    seed_pending(r, "t1")
    assert broker.wait("default", "w1", 0.1) == "t0"
    r.set(keys().paused, "1|ops")
    with pytest.raises(QueuePaused):
        broker.fetch("default", "w1", 5, moved_id="t0")
    assert r.lrange(keys().pending, 0, -1) == ["t1", "t0"]  # t0 is next again
    assert r.llen(keys().processing("w1")) == 0 and r.get(keys().status("t0")) is None
    assert r.hget(keys().task("t0"), "deliveries") == "0"
    r.delete(keys().paused)
    assert [d.id for d in broker.fetch("default", "w1", 5)] == ["t0", "t1"]


def test_a_guard_key_of_the_wrong_type_does_not_abort_fetch(r, broker):
    """status:<id> holding a list (another program wrote it) makes that id CORRUPT; the others still run."""
    seed_pending(r, "bad")
    seed_pending(r, "good")
    r.rpush(keys().status("bad"), "x")
    got = {d.id: d.code for d in broker.fetch("default", "w1", 5)}
    assert got == {"bad": CORRUPT, "good": RUN}
    assert r.get(keys().status("good")) == "running:w1"
    assert sorted(r.lrange(keys().processing("w1"), 0, -1)) == ["bad", "good"]  # bad is left for burial


@pytest.mark.parametrize("value", ["1700000000000000", "12.5", "-3", "soon", "9" * 40])
def test_an_implausible_enqueued_at_makes_the_delivery_corrupt(r, broker, value):
    """Microseconds (1.7e15) or text where Redis milliseconds belong: buried with the reason, never a crash."""
    seed_pending(r, "t0", enqueued_at=value)
    [d] = broker.fetch("default", "w1", 1)
    assert d.code == CORRUPT and "enqueued_at" in d.problem


def test_a_pending_list_of_the_wrong_type_is_a_clear_error(r, broker):
    import redis

    r.set(keys().pending, "not a list")
    with pytest.raises(redis.ResponseError, match=r"WRONGTYPE .*pending is a string, expected a list"):
        broker.fetch("default", "w1", 1)
