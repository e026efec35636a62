"""lib/errors.lua: the one way retry.lua and bury.lua append to a task's error history."""

import json

import pytest

from django_redisq.compat import TaskResultStatus
from tests.helpers import keys, redis_ms, seed_processing
from tests.testapp import tasks

ERR = {"exc": "builtins.ValueError", "msg": "boom", "tb": "Traceback...", "at": 1}


def errors(r, task_id: str = "t0") -> list:
    return json.loads(r.hget(keys().task(task_id), "errors"))


def fail(r, broker, how: str, msg: str = "boom", task_id: str = "t0") -> None:
    """One failed attempt settled by retry.lua or bury.lua; the task is then held by w1 again."""
    if how == "retry":
        broker.retry("default", "w1", task_id, 0, {**ERR, "msg": msg})
        r.zrem(keys().scheduled, task_id)
    else:
        broker.bury("default", "w1", task_id, {**ERR, "msg": msg}, "failed", failed=True)
        r.zrem(keys().dead, task_id)
    r.lpush(keys().processing("w1"), task_id)


def test_retry_after_an_empty_error_list_stores_valid_json(r, broker):
    seed_processing(r, "t0", "w1")
    r.hset(keys().task("t0"), "errors", "[]")
    broker.retry("default", "w1", "t0", 0, ERR)
    assert [e["msg"] for e in errors(r)] == ["boom"]


SHAPES = {
    "missing": (None, []),
    "empty": ("", []),
    "empty-list": ("[]", []),
    "not-json": ("[{oops", ["earlier errors were stored in a form that does not decode"]),
    "an-object": ('{"exc": "x.Y", "msg": "old", "tb": "", "at": 5}', ["old"]),
    "non-objects": ('[1, "text", null, [2]]', ["1", "text", "null", "[2]"]),
    "our-own": ('[{"exc":"a.B","msg":"old","tb":"","at":5}]', ["old"]),
    "lengths-that-do-not-add-up": ('[{"exc":"a.B","msg":"old","tb":"","at":5}]', ["old"]),
}


@pytest.mark.parametrize("how", ["retry", "bury"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_an_error_history_of_any_shape_is_appended_to(r, broker, how, shape):
    stored, kept = SHAPES[shape]
    seed_processing(r, "t0", "w1")
    if stored is not None:
        r.hset(keys().task("t0"), "errors", stored)
    if shape == "lengths-that-do-not-add-up":
        r.hset(keys().task("t0"), "errors_len", "3,999")
    before = redis_ms(r)
    fail(r, broker, how, "new")
    history = errors(r)
    assert all(isinstance(e, dict) for e in history)
    assert [e.get("msg") for e in history] == [*kept, "new"]
    assert before <= history[-1]["at"] <= redis_ms(r)  # Redis time, not the worker's clock
    fail(r, broker, how, "newer")  # and the rewritten list is appended to in turn
    assert [e.get("msg") for e in errors(r)] == [*kept, "new", "newer"]


@pytest.mark.parametrize("how", ["retry", "bury"])
def test_an_error_sent_in_another_shape_still_gets_redis_time(r, broker, how):
    seed_processing(r, "t0", "w1")
    before = redis_ms(r)
    weird = {"at": 1, "exc": "x.Y", "msg": "m", "tb": "t"}  # "at" first: the text path does not apply
    if how == "retry":
        broker.retry("default", "w1", "t0", 0, weird)
    else:
        broker.bury("default", "w1", "t0", weird, "failed", failed=True)
    [e] = errors(r)
    assert e["msg"] == "m" and before <= e["at"] <= redis_ms(r)


def test_the_history_keeps_the_first_and_the_last_attempts(r, broker):
    seed_processing(r, "t0", "w1")
    for i in range(30):
        fail(r, broker, "retry", str(i))
    fail(r, broker, "bury", "30")
    history = errors(r)
    assert [e["msg"] for e in history] == ["0", *map(str, range(12, 31))]
    assert r.hget(keys().task("t0"), "errors_dropped") == "11"
    lens = [int(n) for n in r.hget(keys().task("t0"), "errors_len").split(",")]
    assert lens == [len(json.dumps(e, separators=(",", ":"))) for e in history]


def test_an_unbounded_history_of_an_older_version_is_cut_at_once(r, broker):
    seed_processing(r, "t0", "w1")
    old = [{"exc": "a.B", "msg": str(i), "tb": "", "at": i} for i in range(100)]
    r.hset(keys().task("t0"), mapping={"errors": json.dumps(old), "errors_dropped": "5"})
    fail(r, broker, "retry", "new")
    assert [e["msg"] for e in errors(r)] == ["0", *map(str, range(82, 100)), "new"]
    assert r.hget(keys().task("t0"), "errors_dropped") == "86"


@pytest.mark.parametrize("garbage", ["[{oops", '{"exc": "x"}', '[1, "two"]', "[]", ""])
def test_get_result_reads_whatever_error_history_it_finds(r, broker, garbage):
    result = tasks.add.delay(1, 2)
    r.hset(keys().task(result.id), mapping={"errors": garbage, "state": "dead"})
    found = tasks.add.get_result(result.id)
    assert found.status == TaskResultStatus.FAILED
    assert all(isinstance(e.traceback, str) for e in found.errors)


def test_get_result_says_how_many_attempts_were_omitted(r, broker):
    result = tasks.add.delay(1, 2)
    history = [{"exc": "a.B", "msg": "m", "tb": f"tb {i}", "at": 1} for i in range(3)]
    r.hset(keys().task(result.id), mapping={"errors": json.dumps(history), "errors_dropped": "7"})
    found = tasks.add.get_result(result.id)
    assert [e.traceback for e in found.errors] == ["tb 0", "(7 attempts omitted)", "tb 1", "tb 2"]
