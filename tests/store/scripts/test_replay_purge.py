import json

from tests.helpers import keys, seed_dead, where_is


def test_replay_resets_failures_and_keeps_history(r, broker):
    seed_dead(r, "t0")
    assert broker.operator.replay("default", ["t0", "not-dead"]) == 1
    data = r.hgetall(keys().task("t0"))
    assert where_is(r, "t0") == ["pending"]
    assert data["state"] == "pending" and data["failures"] == "0" and data["deliveries"] == "0" and "died_at" not in data
    assert len(json.loads(data["errors"])) == 1


def test_replay_all_in_batches(r, broker):
    for i in range(1200):
        seed_dead(r, f"t{i}", died_at=i + 1)
    assert broker.operator.replay_all("default", batch=500) == 1200
    assert r.zcard(keys().dead) == 0 and r.llen(keys().pending) == 1200


def test_replay_keeps_a_dead_letter_that_cannot_run(r, broker):
    r.zadd(keys().dead, {"bare": 5})
    r.hset(keys().task("bare"), mapping={"state": "dead", "died_at": 5, "reason": "missing_task"})
    assert broker.operator.replay("default", ["bare"]) == 0
    assert where_is(r, "bare") == ["dead"]
    assert broker.operator.replay_all("default") == 0  # and replay-all terminates


def test_purge(r, broker):
    seed_dead(r, "t0")
    seed_dead(r, "t1")
    assert broker.operator.purge("default", ["t0", "unknown"]) == 1
    assert not r.exists(keys().task("t0")) and where_is(r, "t1") == ["dead"]
    assert broker.operator.purge_all("default") == 1 and r.zcard(keys().dead) == 0
