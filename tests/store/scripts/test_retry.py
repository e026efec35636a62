import json

import pytest

from django_redisq.exceptions import LeaseLost
from tests.helpers import keys, redis_ms, seed_processing, where_is

ERR = {"exc": "builtins.ValueError", "msg": "boom", "tb": "Traceback...", "at": 1}


def test_retry_schedules_after_the_delay_and_records_the_error(r, broker):
    seed_processing(r, "t0", "w1")
    before = redis_ms(r)
    broker.retry("default", "w1", "t0", 3000, ERR)
    assert where_is(r, "t0") == ["scheduled"]
    assert before + 3000 <= r.zscore(keys().scheduled, "t0") <= redis_ms(r) + 3000
    data = r.hgetall(keys().task("t0"))
    [stored] = json.loads(data["errors"])
    assert stored == {**ERR, "at": stored["at"]} and before <= stored["at"] <= redis_ms(r)  # Redis time
    assert data["failures"] == "1"
    assert not r.exists(keys().status("t0"))  # the next attempt may claim it


def test_errors_accumulate(r, broker):
    seed_processing(r, "t0", "w1")
    broker.retry("default", "w1", "t0", 0, ERR)
    r.zrem(keys().scheduled, "t0")
    r.lpush(keys().processing("w1"), "t0")
    broker.retry("default", "w1", "t0", 0, {**ERR, "msg": "again"})
    errors = json.loads(r.hget(keys().task("t0"), "errors"))
    assert [e["msg"] for e in errors] == ["boom", "again"]
    assert r.get(keys().counter("failed")) == "2"


def test_retry_without_ownership_changes_nothing(r, broker):
    seed_processing(r, "t0", "w2")
    with pytest.raises(LeaseLost):
        broker.retry("default", "w1", "t0", 0, ERR)
    assert where_is(r, "t0") == ["processing:w2"]
    assert r.get(keys().status("t0")) == "running:w2"
