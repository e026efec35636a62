import json

from tests.helpers import keys, redis_ms, seed_processing


def test_heartbeat_registers_and_renews_leases(r, broker):
    seed_processing(r, "mine", "w1")
    seed_processing(r, "other", "w2")
    r.pexpire(keys().status("mine"), 50)
    r.pexpire(keys().status("other"), 50_000)
    broker.heartbeat(["default", "emails"], "w1", {"pid": 1})
    assert abs(r.zscore(keys().workers, "w1") - redis_ms(r)) < 1000
    assert r.zscore(keys("emails").workers, "w1") is not None
    assert json.loads(r.get(keys().worker_info("w1"))) == {"pid": 1}
    assert r.pttl(keys().status("mine")) > 5000
    assert r.pttl(keys().status("other")) <= 50_000
