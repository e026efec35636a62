from tests.helpers import keys, reap, seed_processing, set_heartbeat_age, where_is


def test_reap_gives_back_a_silent_workers_tasks(r, broker):
    seed_processing(r, "t0", "dead-w")
    seed_processing(r, "t1", "dead-w")
    seed_processing(r, "t2", "live-w")
    set_heartbeat_age(r, "dead-w", 60_000)
    set_heartbeat_age(r, "live-w", 0)
    tasks, workers = reap(broker, "default")
    assert (tasks, workers) == (2, ["dead-w"])
    assert where_is(r, "t0") == ["pending"] and where_is(r, "t1") == ["pending"]
    assert r.hget(keys().task("t0"), "state") == "pending"
    assert not r.exists(keys().status("t0"))  # the dead worker's guard is released
    assert where_is(r, "t2") == ["processing:live-w"]
    assert r.zscore(keys().workers, "dead-w") is None


def test_reap_leaves_a_guard_it_does_not_own(r, broker):
    seed_processing(r, "t0", "dead-w", claim=False)
    r.set(keys().status("t0"), "success")
    set_heartbeat_age(r, "dead-w", 60_000)
    reap(broker, "default")
    assert r.get(keys().status("t0")) == "success"


def test_reap_with_nobody_dead(r, broker):
    set_heartbeat_age(r, "w", 100)
    assert reap(broker, "default") == (0, [])


def test_reap_survives_keys_of_the_wrong_type(r, broker):
    """A dead worker's list holding ids whose hash or guard is of the wrong type: all come back."""
    for tid in ("t0", "t1", "t2"):
        seed_processing(r, tid, "dead-w")
    r.delete(keys().task("t1"))
    r.set(keys().task("t1"), "not a hash")
    r.delete(keys().status("t2"))
    r.rpush(keys().status("t2"), "not a string")
    set_heartbeat_age(r, "dead-w", 60_000)
    assert reap(broker, "default") == (3, ["dead-w"])
    assert sorted(r.lrange(keys().pending, 0, -1)) == ["t0", "t1", "t2"]
    assert r.get(keys().task("t1")) == "not a hash"  # fetch finds it CORRUPT and it is buried with the reason


def test_a_processing_list_of_the_wrong_type_does_not_block_reaping_the_others(r, broker):
    r.set(keys().processing("bad-w"), "garbage")
    seed_processing(r, "t0", "dead-w")
    set_heartbeat_age(r, "bad-w", 60_000)
    set_heartbeat_age(r, "dead-w", 60_000)
    tasks, workers = reap(broker, "default")
    assert (tasks, sorted(workers)) == (1, ["bad-w", "dead-w"]) and r.lrange(keys().pending, 0, -1) == ["t0"]
    assert r.get(keys().processing("bad-w")) == "garbage"  # left for an operator to look at, holding no task
