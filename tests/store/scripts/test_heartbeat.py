import json

from tests.helpers import keys, redis_ms, seed_processing


def test_heartbeat_registers_and_renews_leases(r, broker):
    seed_processing(r, "mine", "w1")
    seed_processing(r, "other", "w2")
    r.pexpire(keys().status("mine"), 3000)  # short, but not so short it expires before the call on a loaded machine
    r.pexpire(keys().status("other"), 50_000)
    broker.heartbeat(["default", "emails"], "w1", {"pid": 1})
    assert abs(r.zscore(keys().workers, "w1") - redis_ms(r)) < 1000
    assert r.zscore(keys("emails").workers, "w1") is not None
    assert json.loads(r.get(keys().worker_info("w1"))) == {"pid": 1}
    assert r.pttl(keys().status("mine")) > 5000
    assert r.pttl(keys().status("other")) <= 50_000


def test_a_guard_of_the_wrong_type_does_not_stop_the_renewal_of_the_others(r, broker):
    """status:<id> holding a hash aborted the heartbeat after its ZADD: no guard after it was renewed."""
    for tid in ("first", "bad", "last"):
        seed_processing(r, tid, "w1")
        r.pexpire(keys().status(tid), 3000)
    r.delete(keys().status("bad"))
    r.hset(keys().status("bad"), "x", "1")
    broker.heartbeat(["default"], "w1", {})
    assert r.pttl(keys().status("first")) > 5000 and r.pttl(keys().status("last")) > 5000
    assert r.type(keys().status("bad")) == "hash"  # left for the task's settle step


def test_heartbeat_reports_the_queues_it_was_not_registered_on(r, broker):
    assert broker.heartbeat(["default", "emails"], "w1", {}) == ["default", "emails"]  # first beat
    assert broker.heartbeat(["default", "emails"], "w1", {}) == []
    r.zrem(keys("emails").workers, "w1")  # reaped there
    assert broker.heartbeat(["default", "emails"], "w1", {}) == ["emails"]


def test_a_late_heartbeat_starts_a_new_unbroken_run(r, broker):
    broker.heartbeat(["default"], "w1", {})
    since = int(r.hget(keys().alive, "w1"))
    broker.heartbeat(["default"], "w1", {})
    assert int(r.hget(keys().alive, "w1")) == since
    # an unbroken run that began a minute ago, then a beat too late: the new run starts at the late beat. (Comparing
    # with the first beat's own time raced: on a fast machine all three beats fall in one millisecond.)
    r.hset(keys().alive, "w1", since - 60_000)
    r.zadd(keys().workers, {"w1": redis_ms(r) - broker.heartbeat_gap_ms() - 100})  # as after a Redis pause
    before = redis_ms(r)
    broker.heartbeat(["default"], "w1", {})
    assert int(r.hget(keys().alive, "w1")) >= before
