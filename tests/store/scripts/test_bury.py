import json

import pytest

from django_redisq.exceptions import LeaseLost
from tests.helpers import keys, redis_ms, seed_dead, seed_processing, where_is

ERR = {"exc": "builtins.ValueError", "msg": "boom <b>", "tb": "Traceback...", "at": 1}


def test_bury_stores_the_reason(r, broker):
    seed_processing(r, "t0", "w1")
    r.hset(keys().task("t0"), "idem", "k1")
    r.set(keys().idem("k1"), "t0")
    before = redis_ms(r)
    broker.bury("default", "w1", "t0", ERR, "failed", failed=True)
    assert where_is(r, "t0") == ["dead"]
    data = r.hgetall(keys().task("t0"))
    assert data["state"] == "dead" and data["reason"] == "failed" and data["error"] == "boom <b>"
    assert data["exc"] == "builtins.ValueError" and data["died_at"] and data["failures"] == "1"
    [stored] = json.loads(data["errors"])
    assert stored == {**ERR, "at": stored["at"]} and before <= stored["at"] <= redis_ms(r)  # Redis time, not the client's
    assert r.ttl(keys().task("t0")) == -1
    assert r.get(keys().idem("k1")) == "t0" and r.ttl(keys().idem("k1")) == -1  # the dead letter keeps its key
    assert r.get(keys().counter("dead_count")) == "1"


def test_bury_an_id_without_data(r, broker):
    r.lpush(keys().processing("w1"), "garbage")
    broker.bury("default", "w1", "garbage", ERR, "missing_task", failed=False)
    assert where_is(r, "garbage") == ["dead"]
    assert r.hget(keys().task("garbage"), "reason") == "missing_task"


def test_bury_without_ownership(r, broker):
    seed_processing(r, "t0", "w2")
    with pytest.raises(LeaseLost):
        broker.bury("default", "w1", "t0", ERR, "failed", failed=True)
    assert where_is(r, "t0") == ["processing:w2"]


@pytest.mark.parametrize(("limit", "kept"), [(0, 6), (3, 3)])
def test_dead_letter_queue_is_bounded_by_count(r, broker, settings, limit, kept):
    settings.TASKS = {**settings.TASKS, "default": {**settings.TASKS["default"], "OPTIONS": {
        **settings.TASKS["default"]["OPTIONS"], "DEAD_LETTER_MAX": limit}}}
    from django_redisq.settings.read import get_options
    from django_redisq.store.broker import Broker

    b = Broker(get_options("default"))
    now = redis_ms(r)
    for i in range(5):
        seed_dead(r, f"old{i}", died_at=now - 10_000 + i)
    seed_processing(r, "t0", "w1")
    b.bury("default", "w1", "t0", ERR, "failed", failed=True)
    assert r.zcard(keys().dead) == kept
    assert r.zscore(keys().dead, "t0") is not None  # the newest is never the one trimmed
    assert r.exists(keys().task("old0")) == (1 if limit == 0 else 0)


def test_dead_letters_older_than_retention_are_trimmed(r, broker):
    seed_dead(r, "ancient", died_at=1)  # 1970: older than any retention
    seed_processing(r, "t0", "w1")
    assert broker.bury("default", "w1", "t0", ERR, "failed", failed=True) == 1
    assert where_is(r, "ancient") == [] and not r.exists(keys().task("ancient"))
