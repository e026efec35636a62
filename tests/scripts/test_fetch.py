from django_redisq.broker import BUSY, DONE, NOMSG, RUN
from tests.helpers import keys, seed_pending, where_is


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
