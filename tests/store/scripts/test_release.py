from tests.helpers import keys, seed_pending, where_is


def test_release_unstarted_undoes_the_claim(r, broker):
    seed_pending(r, "t0", deliveries=1, workers="w0")
    broker.heartbeat(["default"], "w1", {})
    broker.fetch("default", "w1", 1)
    assert broker.release("default", "w1", ["t0"]) == 1
    data = r.hgetall(keys().task("t0"))
    assert where_is(r, "t0") == ["pending"]
    assert data["deliveries"] == "1" and data["workers"] == "w0" and data["state"] == "pending"
    assert not r.exists(keys().status("t0"))


def test_release_all_deregisters(r, broker):
    seed_pending(r, "t0")
    broker.heartbeat(["default"], "w1", {})
    broker.fetch("default", "w1", 1)
    assert broker.release("default", "w1") == 1
    assert where_is(r, "t0") == ["pending"]
    assert r.zscore(keys().workers, "w1") is None and not r.exists(keys().worker_info("w1"))


def test_release_survives_keys_of_the_wrong_type(r, broker):
    from tests.helpers import seed_processing

    for tid in ("t0", "t1", "t2"):
        seed_processing(r, tid, "w1")
    r.delete(keys().task("t1"))
    r.set(keys().task("t1"), "not a hash")
    r.delete(keys().status("t2"))
    r.hset(keys().status("t2"), "x", "1")
    assert broker.release("default", "w1", ["t0", "t1", "t2"]) == 3
    assert sorted(r.lrange(keys().pending, 0, -1)) == ["t0", "t1", "t2"]
    assert r.hget(keys().task("t0"), "deliveries") == "0"
