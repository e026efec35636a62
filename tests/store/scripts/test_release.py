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


def test_a_late_hand_back_leaves_a_newer_claim_of_the_same_task_alone(r, broker):
    """A worker reaped while paused and back again may fetch the task anew before its own hand-back of the old
    claim lands: with the claim's delivery count, release.lua undoes only that claim, never the newer one."""
    broker.heartbeat(["default"], "w1", {})
    seed_pending(r, "t0")
    (old,) = broker.fetch("default", "w1", 1)
    r.lrem(keys().processing("w1"), 1, "t0")  # reaped: back to pending, its delivery kept
    r.delete(keys().status("t0"))
    r.rpush(keys().pending, "t0")
    (new,) = broker.fetch("default", "w1", 1)
    assert new.deliveries == old.deliveries + 1
    assert broker.release("default", "w1", ["t0"], [old.deliveries]) == 0
    assert where_is(r, "t0") == ["processing:w1"] and r.get(keys().status("t0")) == "running:w1"
    assert int(r.hget(keys().task("t0"), "deliveries")) == new.deliveries
    assert broker.release("default", "w1", ["t0"], [new.deliveries]) == 1  # its own claim: undone
    assert where_is(r, "t0") == ["pending"] and int(r.hget(keys().task("t0"), "deliveries")) == old.deliveries
