"""Bad input, tried systematically at every entry point (invariant 4 (docs/explanation/architecture.md)).

* enqueue: arguments that are not JSON, too large, too deep; an unknown queue,
  a bad priority, a naive ``run_after``: a clear exception, nothing stored;
* the queue itself: garbage pushed straight into the pending list and the task
  hash (not JSON, not an object, missing fields, wrong types, unknown task, a
  dotted path to a real function that is not a task, a newer schema, arguments
  that do not fit): each becomes a dead letter with its reason, the worker
  stays alive and runs the next good task, nothing is lost;
* a Hypothesis fuzz of random messages and ids pushed into the queue;
* settings: wrong types, unknown keys (``conf.validate`` and Django's system
  checks, and runworker refusing to start); unreachable Redis; a Redis older
  than 6.2; a Redis whose maxmemory-policy evicts keys.

Tests headed "regression" were written against engine defects this suite
found (a lost task, a worker whose threads died, a poison message that was
never dead-lettered, ...); they failed then and guard the fixes now.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from django_redisq import InvalidArguments, connection
from django_redisq.compat import UTC, InvalidTask, TaskResultDoesNotExist, TaskResultStatus
from django_redisq.core.options import Options
from django_redisq.exceptions import RedisUnavailable
from django_redisq.settings.read import build_options, get_options, validate
from django_redisq.store import server as store_server
from django_redisq.store.keys import QueueKeys
from django_redisq.testing import RedisServer, free_port
from tests.conftest import PROPERTY_EXAMPLES, WorkerProcess
from tests.helpers import run_burst
from tests.testapp import chaos_tasks, tasks

K = QueueKeys("default")
NOOP = "tests.testapp.tasks.noop"


def _msg(**fields: Any) -> str:
    base: dict[str, Any] = {"v": 1, "task": NOOP, "args": [1], "kwargs": {}, "queue": "default", "backend": "default",
                            "priority": 0}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


def push(r: redis.Redis, tid: str | bytes, msg: str | bytes | None, **fields: Any) -> None:
    """Put a task straight into pending, as a foreign or buggy producer could."""
    if msg is not None:
        data = {"msg": msg, "task": NOOP, "state": "pending", "enqueued_at": 1, "deliveries": 0, "failures": 0, "idem": ""}
        data.update(fields)
        r.hset(K.task(tid), mapping=data)  # type: ignore[arg-type]
    r.lpush(K.pending, tid)


def nothing_stored(r: redis.Redis) -> bool:
    return not any(key for key in r.scan_iter(match="redisq:*") if not key.endswith(":workers") and ":worker:" not in key)


def dead_reason(r: redis.Redis, tid: str) -> str | None:
    if r.zscore(K.dead, tid) is None:
        return None
    return r.hget(K.task(tid), "reason")


def settled_behind(r: redis.Redis, result_id: str) -> bool:
    return tasks.noop.get_result(result_id).status == TaskResultStatus.SUCCESSFUL


# -- enqueue: a clear exception in the caller, nothing stored ---------------------


@pytest.mark.parametrize("value", [
    object(), {1, 2}, 1 + 2j, float("nan"), float("inf"), datetime.now(UTC), b"\xff\xfe",
    {1: "int key"}, {(1, 2): "tuple key"}, [object()], {"nested": {"deeper": [set()]}},
], ids=lambda v: type(v).__name__)
def test_non_json_arguments_raise_invalid_arguments(r, value):
    with pytest.raises(InvalidArguments, match="JSON"):
        tasks.noop.enqueue(value)
    with pytest.raises(InvalidArguments):
        tasks.add.enqueue(1, b=value)
    assert nothing_stored(r)


def test_json_like_values_arrive_as_json(r, make_worker):
    result = tasks.noop.enqueue((1, "two", [3.5, None, True]))  # a tuple arrives as a list
    assert result.args == [[1, "two", [3.5, None, True]]]
    assert run_burst(make_worker("default"), 8).finished
    assert tasks.noop.get_result(result.id).return_value == [1, "two", [3.5, None, True]]


def test_arguments_over_max_message_bytes_raise_a_clear_error(r):
    limit = get_options().max_message_bytes
    assert limit == 512 * 1024  # the documented default
    overhead = len(json.dumps([[""], {}], separators=(",", ":")))
    fits = "x" * (limit - overhead)
    assert tasks.noop.enqueue(fits).id  # exactly at the limit: stored
    with pytest.raises(InvalidArguments) as exc:
        tasks.noop.enqueue(fits + "x")
    text = str(exc.value)
    assert f"{limit + 1} bytes" in text and str(limit) in text and "MAX_MESSAGE_BYTES" in text
    with pytest.raises(InvalidArguments, match="MAX_MESSAGE_BYTES"):  # multi-byte characters count as bytes
        tasks.noop.enqueue("é" * (limit // 2))
    assert r.llen(K.pending) == 1


def test_max_message_bytes_setting_is_enforced(r, redis_url):
    tasks_setting = copy.deepcopy(settings.TASKS)
    tasks_setting["default"]["OPTIONS"]["MAX_MESSAGE_BYTES"] = 1000
    with override_settings(TASKS=tasks_setting):
        with pytest.raises(InvalidArguments, match="the limit is 1000"):
            tasks.noop.enqueue("y" * 1000)
        tasks.noop.enqueue("y" * 900)
    assert r.llen(K.pending) == 1


# regression (engine defect found here, fixed): deeply nested arguments raised RecursionError from normalize_json/json,
# not InvalidArguments (message.encode_arguments)
def test_deeply_nested_arguments_raise_invalid_arguments(r):
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    try:
        with pytest.raises(InvalidArguments):
            tasks.noop.enqueue(deep)
    finally:
        assert nothing_stored(r)


# regression (engine defect found here, fixed): a lone surrogate passed encode_arguments (ensure_ascii=False) and
# failed later in redis-py with UnicodeEncodeError, not InvalidArguments
def test_lone_surrogate_argument_raises_invalid_arguments(r):
    try:
        with pytest.raises(InvalidArguments):
            tasks.noop.enqueue("\ud800")
    finally:
        assert nothing_stored(r)


def test_unknown_queue_is_refused(r):
    with pytest.raises(InvalidTask, match="nope"):
        tasks.noop.using(queue_name="nope")
    with pytest.raises(InvalidTask):
        tasks.noop.using(queue_name="{default}")
    assert nothing_stored(r)


@pytest.mark.parametrize("priority", [101, -101, 10**9, 1.5, -0.5])
def test_priority_out_of_range_or_not_whole_is_refused(r, priority):
    # Django's range, -100..100, whole numbers only (tests/store/test_priority.py runs the valid ones)
    with pytest.raises(InvalidTask, match="priority"):
        tasks.noop.using(priority=priority)
    assert nothing_stored(r)


def test_naive_run_after_is_refused(r):
    with pytest.raises(InvalidTask, match="aware"):
        tasks.noop.using(run_after=datetime(2030, 1, 1))  # naive: the point of the test
    assert nothing_stored(r)


def test_aware_run_after_in_the_past_runs_now(r):
    tasks.noop.using(run_after=datetime.now(UTC) - timedelta(days=1)).enqueue(1)
    assert r.llen(K.pending) == 1 and r.zcard(K.scheduled) == 0


@pytest.mark.parametrize("bad_id", ["", "x" * 65, "*", 42, None, "no-such-id"])
def test_get_result_of_garbage_id_does_not_exist(r, bad_id):
    with pytest.raises(TaskResultDoesNotExist):
        tasks.noop.get_backend().get_result(bad_id)


# -- garbage in the queue: a dead letter with its reason, the worker alive ------------

CANARY = Path(f"/tmp/redisq-canary-{os.getpid()}")

GARBAGE: list[tuple[str, Any, str]] = [
    ("not_json", "{this is not json", "bad_message"),
    ("empty", "", "bad_message"),
    ("json_array", "[1, 2, 3]", "bad_message"),
    ("json_string", '"hello"', "bad_message"),
    ("json_null", "null", "bad_message"),
    ("json_number", "42", "bad_message"),
    ("task_null", _msg(task=None), "bad_message"),  # the task path may come from the hash, but not as null
    ("queue_null", _msg(queue=None), "bad_message"),
    ("missing_version", _msg(v=...), "unknown_schema"),
    ("task_not_string", _msg(task=42), "bad_message"),
    ("empty_task", _msg(task=""), "bad_message"),
    ("args_not_list", _msg(args="1"), "bad_message"),
    ("kwargs_not_object", _msg(kwargs=[1]), "bad_message"),
    ("queue_not_string", _msg(queue=5), "bad_message"),
    ("backend_not_string", _msg(backend=None), "bad_message"),
    ("priority_not_int", _msg(priority="high"), "bad_message"),
    ("priority_bool", _msg(priority=True), "bad_message"),
    ("unknown_task", _msg(task="tests.testapp.tasks.no_such_task"), "unknown_task"),
    ("os_system", _msg(task="os.system", args=[f"touch {CANARY}"]), "unknown_task"),
    ("subprocess", _msg(task="subprocess.call", args=[["touch", str(CANARY)]]), "unknown_task"),
    ("real_function_not_a_task", _msg(task="tests.testapp.chaos_tasks.effects_store", args=[]), "unknown_task"),
    ("task_attribute_path", _msg(task="tests.testapp.tasks.noop.func"), "unknown_task"),
    ("newer_schema", _msg(v=2), "unknown_schema"),
    ("schema_as_string", _msg(v="1"), "unknown_schema"),
    ("too_many_args", _msg(args=[1, 2, 3]), "bad_arguments"),
    ("missing_args", _msg(task="tests.testapp.tasks.add", args=[1]), "bad_arguments"),
    ("unknown_kwarg", _msg(task="tests.testapp.tasks.add", args=[1, 2], kwargs={"c": 3}), "bad_arguments"),
    ("deeply_nested", '{"v":1,"task":"' + NOOP + '","args":[' + "[" * 50_000 + "]" * 50_000 + "]}", "bad_message"),
    ("no_task_data", None, "missing_task"),
]


@pytest.mark.parametrize(("msg", "reason"), [(m, r) for _, m, r in GARBAGE], ids=[n for n, _, _ in GARBAGE])
def test_garbage_in_the_queue_is_dead_lettered_with_its_reason(r, make_worker, msg, reason, caplog):
    CANARY.unlink(missing_ok=True)
    push(r, "bad-1", msg)
    good = tasks.noop.enqueue(7)  # queued behind the bad one: the worker must survive to run it
    with caplog.at_level(logging.WARNING, logger="django_redisq.tasks"):
        run = run_burst(make_worker("default"), 8)
    # the worker says so at once, in one WARNING line with the task, the id, the reason and what to do
    lines = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING and "id=bad-1 " in rec.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert lines[0].startswith("task ") and f" reason={reason}" in lines[0] and "; hint: " in lines[0], lines[0]
    assert run.crashed == [] and run.finished
    assert dead_reason(r, "bad-1") == reason
    assert settled_behind(r, good.id)
    assert r.llen(K.pending) == 0 and not list(r.scan_iter(match=K.prefix + "processing:*"))
    assert not CANARY.exists(), "a dotted path from a message was executed"
    if msg is not None:  # the operator sees why
        data = r.hgetall(K.task("bad-1"))
        assert data["state"] == "dead" and data["error"] and data["msg"] == msg
        assert r.get(K.status("bad-1")) is None  # no guard left behind


def test_a_message_naming_os_system_never_runs_it(r, make_worker):
    CANARY.unlink(missing_ok=True)
    for i, path in enumerate(["os.system", "posix.system", "builtins.exec", "django.core.management.call_command"]):
        push(r, f"evil-{i}", _msg(task=path, args=[f"touch {CANARY}"]), task=path)
    assert run_burst(make_worker("default"), 8).finished
    assert not CANARY.exists()
    assert sorted(r.zrange(K.dead, 0, -1)) == [f"evil-{i}" for i in range(4)]
    assert {r.hget(K.task(f"evil-{i}"), "reason") for i in range(4)} == {"unknown_task"}
    # reading it back (admin, get_result) does not run it either
    for i in range(4):
        with pytest.raises(Exception):  # noqa: B017 - any refusal; what matters is the canary
            tasks.noop.get_backend().get_result(f"evil-{i}")
    assert not CANARY.exists()


# regression (engine defect found here, fixed): backend.resolve_task import_string()ed a dotted path read from
# Redis, importing (running the top level of) any module named by a stored task
def test_reading_a_result_does_not_import_modules_named_in_redis(r):
    sys.modules.pop("this", None)  # importing `this` prints the Zen of Python: a visible side effect
    push(r, "zen", _msg(task="this.s"), task="this.s", state="dead")
    with pytest.raises(Exception):  # noqa: B017 - refusing is right; importing first is the defect
        tasks.noop.get_backend().get_result("zen")
    assert "this" not in sys.modules


# -- garbage that broke the engine when this suite was written (regressions) -----------


# regression (engine defect found here, fixed): a non-integer 'deliveries' field made fetch.lua raise after LMOVE;
# the id cycled fetch -> sweep -> pending forever and was never dead-lettered
def test_task_hash_with_a_non_integer_field_is_dead_lettered(r, make_worker):
    push(r, "poison", _msg(), deliveries="abc")
    good = tasks.noop.enqueue(7)
    run = run_burst(make_worker("default", prefetch=1), 6)
    assert run.finished, "the burst worker never drained the queue"
    assert dead_reason(r, "poison") is not None
    assert settled_behind(r, good.id)


# regression (engine defect found here, fixed): a task key of the wrong Redis type made fetch.lua fail with
# WRONGTYPE after LMOVE; the id was never dead-lettered
def test_task_key_of_the_wrong_type_is_dead_lettered(r, make_worker):
    r.set(K.task("wrongtype"), "a string, not a hash")
    r.lpush(K.pending, "wrongtype")
    run = run_burst(make_worker("default"), 6)
    assert run.finished
    assert r.zscore(K.dead, "wrongtype") is not None


# regression (engine defect found here, fixed): an id that is not UTF-8 raised UnicodeDecodeError in the fetcher and
# heartbeat threads (decode_responses, strict errors): both died
def test_an_id_that_is_not_utf8_is_dead_lettered_and_the_worker_lives(r, make_worker):
    raw = redis.Redis(host="127.0.0.1", port=r.connection_pool.connection_kwargs["port"])  # bytes in, bytes out
    raw.lpush(K.pending, b"\xff\xfe-id")
    good = tasks.noop.enqueue(7)
    run = run_burst(make_worker("default"), 6)
    raw.close()
    assert run.crashed == []
    assert run.finished and settled_behind(r, good.id)
    assert r.zcard(K.dead) == 1


# regression (engine defect found here, fixed): a message that is not UTF-8 raised UnicodeDecodeError while reading
# fetch.lua's reply; the fetcher thread died
def test_a_message_that_is_not_utf8_is_dead_lettered(r, make_worker):
    push(r, "latin1", b"\xe9t\xe9")
    good = tasks.noop.enqueue(7)
    run = run_burst(make_worker("default"), 6)
    assert run.crashed == []
    assert run.finished and settled_behind(r, good.id)
    assert dead_reason(r, "latin1") == "bad_message"


# regression (engine defect found here, fixed) (LOST TASK): bury.lua LREMed the id, then cjson.decode of the error JSON
# failed on a lone surrogate escape; the script aborted after the LREM, the retried bury got LEASE_LOST, and the task
# was in no list at all
def test_a_task_failing_with_undecodable_text_is_not_lost(r, make_worker):
    result = chaos_tasks.fails_with_undecodable_name.enqueue()
    run = run_burst(make_worker("default"), 6)
    assert run.finished
    k = K
    places = [name for name, found in [
        ("pending", result.id in r.lrange(k.pending, 0, -1)), ("scheduled", r.zscore(k.scheduled, result.id) is not None),
        ("dead", r.zscore(k.dead, result.id) is not None),
        ("processing", any(result.id in r.lrange(p, 0, -1) for p in r.scan_iter(match=k.prefix + "processing:*"))),
    ] if found]
    assert places == ["dead"], f"task is in {places or 'no list: LOST'}; hash state {r.hget(k.task(result.id), 'state')!r}"


# -- fuzz: random messages and ids, every one accounted for ---------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
garbage_text = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=200).map(lambda b: b.decode("utf-8", "replace")),
    json_values.map(json.dumps),
    st.fixed_dictionaries({"v": st.sampled_from([1, 2, None, "1"]), "task": st.sampled_from([NOOP, "os.system", "x", ""])},
                          optional={"args": json_values, "kwargs": json_values, "queue": json_values,
                                    "backend": json_values, "priority": json_values}).map(json.dumps),
)
garbage_ids = st.text(min_size=0, max_size=40)


@pytest.mark.slow
@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(st.tuples(garbage_ids, st.none() | garbage_text), min_size=1, max_size=6, unique_by=lambda t: t[0]))
def test_fuzz_random_messages_all_end_dead_and_the_worker_lives(r, make_worker, batch):
    r.flushall()
    for tid, msg in batch:
        push(r, tid, msg)
    good = tasks.noop.enqueue(7)
    run = run_burst(make_worker("default"), 8)
    assert run.crashed == [] and run.finished
    assert settled_behind(r, good.id)
    dead = set(r.zrange(K.dead, 0, -1))
    for tid, msg in batch:
        if tid in dead:
            continue
        # only a message that happens to be a valid call of a registered task may run
        assert msg is not None and r.hget(K.task(tid), "state") == "finished", (tid, msg)
    assert r.llen(K.pending) == 0 and not list(r.scan_iter(match=K.prefix + "processing:*"))


# regression (engine defect found here, fixed): bytes that are not UTF-8 (as an id or a message) killed the fetcher
# thread: see test_an_id_that_is_not_utf8_is_dead_lettered_and_the_worker_lives
@pytest.mark.slow
@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(st.tuples(st.binary(max_size=40), st.none() | st.binary(max_size=200)), min_size=1, max_size=6,
                      unique_by=lambda t: t[0]))
def test_fuzz_random_bytes_all_end_dead_and_the_worker_lives(r, make_worker, batch):
    raw = redis.Redis(host="127.0.0.1", port=r.connection_pool.connection_kwargs["port"])
    raw.flushall()
    for tid, msg in batch:
        if msg is not None:
            raw.hset(K.prefix.encode() + b"t:" + tid, mapping={"msg": msg, "state": "pending", "deliveries": 0, "failures": 0})
        raw.lpush(K.pending, tid)
    good = tasks.noop.enqueue(7)
    run = run_burst(make_worker("default"), 5)
    try:
        assert run.crashed == [] and run.finished
        assert settled_behind(r, good.id)
        assert raw.zcard(K.dead) + sum(
            raw.hget(K.prefix.encode() + b"t:" + tid, "state") == b"finished" for tid, _ in batch) == len(batch)
    finally:
        raw.close()


# -- settings ------------------------------------------------------------------------

BAD_SETTINGS: list[tuple[Any, str]] = [
    ({"QUEUES": "default"}, "E001"),
    ({"QUEUES": []}, "E001"),
    ({"QUEUES": [None]}, "E002"),
    ({"QUEUES": ["a b"]}, "E002"),
    ({"QUEUES": ["{x}"]}, "E002"),
    ({"OPTIONS": ["REDIS_URL"]}, "E003"),
    ({"OPTIONS": {"REDIS_URI": "redis://127.0.0.1/0"}}, "E004"),
    ({"OPTIONS": {"MAXRETRIES": 3}}, "E004"),
    ({"OPTIONS": {"REDIS_URL": "redis://127.0.0.1/0", "EMBEDDED": True}}, "E005"),
    ({"OPTIONS": {"REDIS_URL": 6379}}, "E006"),
    ({"OPTIONS": {"REDIS_URL": "http://127.0.0.1:6379"}}, "E006"),
    ({"OPTIONS": {"CACHE_ALIAS": "nope"}}, "E007"),
    ({"OPTIONS": {"KEY_PREFIX": ""}}, "E011"),
    ({"OPTIONS": {"KEY_PREFIX": "a{b}"}}, "E011"),
    ({"OPTIONS": {"MAX_RETRIES": "3"}}, "E012"),
    ({"OPTIONS": {"MAX_RETRIES": 2.5}}, "E012"),
    ({"OPTIONS": {"MAX_RETRIES": True}}, "E012"),
    ({"OPTIONS": {"MAX_RETRIES": -1}}, "E012"),
    ({"OPTIONS": {"WORKER_TIMEOUT": None}}, "E012"),
    ({"OPTIONS": {"HEARTBEAT_INTERVAL": 0}}, "E012"),
    ({"OPTIONS": {"MAX_MESSAGE_BYTES": 10}}, "E012"),
    ({"OPTIONS": {"QUEUE_OPTIONS": []}}, "E013"),
    ({"OPTIONS": {"QUEUE_OPTIONS": {"default": 3}}}, "E013"),
    ({"OPTIONS": {"QUEUE_OPTIONS": {"nope": {"MAX_RETRIES": 1}}}}, "E014"),
    ({"OPTIONS": {"QUEUE_OPTIONS": {"default": {"WORKER_TIMEOUT": 5}}}}, "E015"),
    ({"OPTIONS": {"QUEUE_OPTIONS": {"default": {"MAX_RETRIES": "x"}}}}, "E012"),
    ({"OPTIONS": {"WORKER_TIMEOUT": 3, "HEARTBEAT_INTERVAL": 2}}, "E016"),
]


@pytest.mark.parametrize(("params", "code"), BAD_SETTINGS, ids=[f"{c}-{i}" for i, (_, c) in enumerate(BAD_SETTINGS)])
def test_bad_settings_are_named_by_validate_and_refused_by_build_options(params, code):
    full = {"BACKEND": "django_redisq.backend.RedisQueueBackend", **params}
    problems = validate("default", full)
    assert code in [p[0] for p in problems], problems
    for _, message, hint in problems:
        assert message and hint and "\n" not in message
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match=code):
        build_options("default", full)


def test_params_that_are_not_a_dict_are_reported_not_crashed():
    for params in (None, [], "default", 42):
        assert {p[0] for p in validate("default", params)} >= {"E001", "E003"}


# regression (engine defect found here, fixed): conf.validate called urlsplit() on REDIS_URL unguarded; a malformed URL
# (e.g. 'redis://[::1') raised ValueError out of the system check
def test_a_malformed_redis_url_is_reported_not_crashed():
    assert "E006" in [p[0] for p in validate("default", {"OPTIONS": {"REDIS_URL": "redis://[::1"}})]


@hsettings(max_examples=3 * PROPERTY_EXAMPLES, deadline=None)
@given(params=st.dictionaries(
    st.sampled_from(["QUEUES", "OPTIONS", "BACKEND", "OTHER"]),
    st.one_of(json_values, st.dictionaries(
        st.sampled_from(["MAX_RETRIES", "BACKOFF_BASE", "WORKER_TIMEOUT", "HEARTBEAT_INTERVAL", "KEY_PREFIX", "QUEUE_OPTIONS",
                         "EMBEDDED", "MAX_MESSAGE_BYTES", "PREFETCH", "DEAD_LETTER_MAX", "UNKNOWN"]),
        st.one_of(json_values, st.dictionaries(st.sampled_from(["default", "x"]), json_values, max_size=2)), max_size=5)),
    max_size=4))
def test_validate_never_raises_on_any_settings_shape(params):
    from django.core.exceptions import ImproperlyConfigured

    problems = validate("default", params)
    assert all(isinstance(p, tuple) and len(p) == 3 for p in problems)
    try:
        opts = build_options("default", params)
    except ImproperlyConfigured:
        assert problems
    else:
        assert not problems and isinstance(opts, Options)


def test_django_system_checks_report_bad_settings(r):
    bad = copy.deepcopy(settings.TASKS)
    bad["default"]["OPTIONS"].update({"NOT_AN_OPTION": 1, "MAX_RETRIES": "three"})
    with override_settings(TASKS=bad):
        ids = {e.id for e in run_checks()}
        assert {"django_redisq.E004", "django_redisq.E012"} <= ids
        with pytest.raises(SystemCheckError, match="NOT_AN_OPTION"):
            call_command("check")


def _runworker(url: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[int, str, float]:
    """Run ``runworker`` against ``url`` to its end (killed after ``timeout``); exit code, output, seconds."""
    wp = WorkerProcess(url, *args, env=env)
    start = time.monotonic()
    try:
        wp.proc.wait(timeout)
    finally:
        if wp.proc.poll() is None:
            wp.proc.kill()
            wp.proc.wait(10)
    return wp.proc.returncode, wp.output(), time.monotonic() - start


def test_runworker_refuses_bad_settings(redis_url):
    code, out, _ = _runworker(redis_url, "--burst", env={"REDISQ_OPT_MAX_RETRIES": "-1", "REDISQ_OPT_BOGUS": "1"})
    assert code == 1
    assert "django_redisq.E012" in out and "django_redisq.E004" in out and "BOGUS" in out
    assert "Traceback" not in out


def test_runworker_against_unreachable_redis_is_one_line_and_exit_3():
    url = f"redis://:not-a-real-secret@127.0.0.1:{free_port()}/0"  # nothing listens there
    code, out, seconds = _runworker(url, "--burst")
    assert code == 3
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out
    assert lines[0].startswith("CommandError: cannot reach Redis at redis://127.0.0.1:")
    assert "not-a-real-secret" not in out
    assert seconds < 30


# -- Redis versions: the only non-Redis server in the suite -------------------------------


@pytest.fixture
def old_redis() -> Iterator[str]:
    """A loopback socket that answers like Redis 6.0.16 (``+OK`` to anything, INFO with the version).

    Redis older than 6.2 cannot be installed here, so this stub exercises the
    version check on its real path (runworker -> check_server -> INFO); it is a
    unit test of the comparison, not of Redis.
    """
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    stop = threading.Event()
    info = b"# Server\r\nredis_version:6.0.16\r\nredis_mode:standalone\r\n"

    def serve(conn: socket.socket) -> None:
        conn.settimeout(5)
        buf = b""
        try:
            while not stop.is_set():
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
                while buf.startswith(b"*"):
                    parts = buf.split(b"\r\n")
                    n = int(parts[0][1:])
                    if len(parts) < 1 + 2 * n + 1:
                        break
                    words = parts[2: 2 + 2 * n: 2]
                    buf = b"\r\n".join(parts[1 + 2 * n:])
                    if words and words[0].upper() == b"INFO":
                        conn.sendall(b"$%d\r\n%s\r\n" % (len(info), info))
                    else:
                        conn.sendall(b"+OK\r\n")
        except OSError:
            return
        finally:
            conn.close()

    def accept() -> None:
        for _ in range(600):  # bounded: 2 minutes
            if stop.is_set():
                return
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"redis://127.0.0.1:{port}/0"
    stop.set()
    thread.join(5)
    srv.close()


def test_redis_older_than_6_2_is_refused_by_check_server(old_redis):
    try:
        with pytest.raises(RedisUnavailable, match=r"version 6\.0\.16; django_redisq needs 6\.2 or newer"):
            store_server.check_server(build_options("default", {"OPTIONS": {"REDIS_URL": old_redis}}))
    finally:
        connection.reset()


def test_runworker_refuses_redis_older_than_6_2(old_redis):
    code, out, _ = _runworker(old_redis, "--burst")
    assert code == 3  # Redis it cannot use: nothing started (management/cli/out.py)
    assert "CommandError:" in out and "needs 6.2 or newer" in out and "Traceback" not in out


def test_the_redis_here_passes_the_version_check(redis_url):
    info = store_server.check_server(get_options())
    assert tuple(int(x) for x in info["redis_version"].split(".")[:2]) >= (6, 2)


# -- an evicting Redis: a warning at worker start ------------------------------------------


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru", "allkeys-random"])
def test_an_evicting_maxmemory_policy_is_warned_about_at_worker_start(policy):
    with RedisServer(None, None, "--maxmemory", "64mb", "--maxmemory-policy", policy) as srv:
        code, out, _ = _runworker(srv.url, "--burst")
    assert code == 0, out
    assert f"maxmemory-policy is '{policy}'" in out and "noeviction" in out


def test_noeviction_gives_no_eviction_warning():
    with RedisServer(None, None, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction", appendonly=True) as srv:
        code, out, _ = _runworker(srv.url, "--burst")
    assert code == 0, out
    assert "maxmemory-policy" not in out and "persistence is off" not in out

