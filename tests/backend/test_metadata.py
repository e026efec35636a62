"""Django's metadata proposal (new-features #141), where the running Django has it.

Released Django has no ``Task.metadata``, ``TaskResult.raw_metadata`` or
``TaskContext.metadata``; ``tests/testapp/metadata_tasks.py`` has stand-ins that
add them the way Django's branch does, and a backend building them, so what our
backend stores and returns, and what a running task sees and saves, is tested on
every Django we support, in every pool. The task functions are those of Django's
own ``tests/tasks/tasks.py`` for the proposal.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from django_redisq.compat import FRAMEWORK_HAS_METADATA, TaskResult, TaskResultDoesNotExist, TaskResultStatus, task_backends
from django_redisq.exceptions import InvalidArguments
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from tests.backend.test_contract import TASK_FIELDS
from tests.helpers import drain, keys, where_is
from tests.testapp import contract_tasks as ct
from tests.testapp import metadata_tasks as mt
from tests.worker.test_pools import POOLS, serving, settled


@pytest.fixture
def with_metadata(r) -> Any:
    """Our backend on a Django with the proposal (the stand-ins where the running one lacks it)."""
    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["BACKEND"] = mt.BACKEND
    with override_settings(TASKS=tasks):
        yield


def fresh(result: TaskResult) -> Any:
    """The result as get_result rebuilds it from Redis (``refresh()`` copies raw_metadata only where Django has it)."""
    return task_backends["default"].get_result(result.id)


def saved(r, result: TaskResult) -> Any:
    """The metadata field of the task hash (what was saved after enqueue), or None."""
    text = r.hget(keys().task(result.id), "metadata")
    return None if text is None else json.loads(text)


def test_the_backend_says_it_supports_metadata():
    assert task_backends["default"].supports_metadata is True


# -- enqueue and get_result --------------------------------------------------


def test_metadata_is_stored_with_the_task_and_returned(r, with_metadata):
    task = mt.MetadataTask(func=ct.ours_add.func, **TASK_FIELDS, metadata={"trace_id": 123, "tags": ("a", "b")})
    result = task.enqueue(1, 2)
    assert json.loads(r.hget(keys().task(result.id), "msg"))["m"] == {"trace_id": 123, "tags": ["a", "b"]}
    assert result.raw_metadata == {"trace_id": 123, "tags": ["a", "b"]}  # the enqueue result has it too
    assert fresh(result).raw_metadata == {"trace_id": 123, "tags": ["a", "b"]}


def test_saved_metadata_replaces_the_enqueued_one(r, with_metadata):
    backend = task_backends["default"]
    result = mt.MetadataTask(func=ct.ours_add.func, **TASK_FIELDS, metadata={"a": 1}).enqueue(1, 2)
    backend.save_metadata(result, {"a": 1, "b": (2,)})  # type: ignore[attr-defined]
    assert fresh(result).raw_metadata == {"a": 1, "b": [2]}


def test_no_metadata_reads_as_empty_and_nothing_is_stored(r, with_metadata):
    result = ct.ours_add.enqueue(1, 2)
    assert "m" not in json.loads(r.hget(keys().task(result.id), "msg"))
    assert fresh(result).raw_metadata == {}


def test_metadata_of_a_task_that_is_gone_writes_nothing(r):
    result = ct.ours_add.enqueue(1, 2)
    r.delete(keys().task(result.id))
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].save_metadata(result, {"a": 1})  # type: ignore[attr-defined]
    assert not r.exists(keys().task(result.id))


def test_a_django_without_metadata_gets_results_as_before(r):
    result = mt.MetadataTask(func=ct.ours_add.func, **TASK_FIELDS, metadata={"a": 1}).enqueue(1, 2)
    got = ct.ours_add.get_result(result.id)
    assert type(got) is TaskResult and got.args == [1, 2]


def test_metadata_over_its_limit_or_not_json_is_refused_with_the_reason_and_nothing_is_written(r, with_metadata):
    limit = get_options("default").metadata_max_bytes
    with pytest.raises(InvalidArguments, match="METADATA_MAX_BYTES"):
        mt.update_metadata.using(metadata={"blob": "x" * limit}).enqueue()
    assert r.dbsize() == 0
    result = mt.update_metadata.enqueue()
    backend = task_backends["default"]
    with pytest.raises(ValueError, match="METADATA_MAX_BYTES"):
        backend.save_metadata(result, {"blob": "x" * limit})  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="Unsupported type"):
        backend.save_metadata(result, {"a": object()})  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="keys must be strings"):
        backend.save_metadata(result, {1: "a"})  # type: ignore[attr-defined]
    assert saved(r, result) is None


# -- what a running task sees and saves ----------------------------------------


def test_a_running_task_sees_its_metadata_without_the_reserved_keys(r, make_worker, with_metadata):
    res = mt.get_metadata.using(metadata={"trace_id": 123, "_lib": 2}).enqueue()
    drain(make_worker, [res])
    assert res.return_value == {"trace_id": 123}
    assert saved(r, res) is None  # unmodified: nothing saved
    assert fresh(res).raw_metadata == {"trace_id": 123, "_lib": 2}


def test_modified_metadata_is_saved_when_the_attempt_succeeds(r, make_worker, with_metadata):
    res = mt.update_metadata.using(metadata={"a": 1}).enqueue(b=2)
    nested = mt.append_to_metadata_list.using(metadata={"items": [1]}).enqueue("items", 2)
    drain(make_worker, [res, nested])
    assert res.status == TaskResultStatus.SUCCESSFUL
    assert fresh(res).metadata == {"a": 1, "b": 2} and saved(r, res) == {"a": 1, "b": 2}
    assert fresh(nested).metadata == {"items": [1, 2]}


def test_modified_metadata_is_saved_when_the_attempt_fails_and_each_attempt_starts_from_the_last(r, make_worker, with_metadata):
    failing = mt.update_metadata_and_fail.enqueue(b=2)
    counting = mt.count_attempts.enqueue()
    drain(make_worker, [failing, counting])
    assert failing.status == TaskResultStatus.FAILED and failing.attempts == 2
    assert fresh(failing).metadata == {"b": 2}
    assert counting.status == TaskResultStatus.SUCCESSFUL and counting.return_value == 3 and counting.attempts == 3
    assert fresh(counting).metadata == {"tries": 3}


def test_reserved_keys_keep_their_values_when_a_task_saves(r, make_worker, with_metadata):
    res = mt.update_metadata.using(metadata={"_reserved": "backend", "a": 1}).enqueue(_reserved="user", _other="user", b=2)
    drain(make_worker, [res])
    got = fresh(res)
    assert got.metadata == {"a": 1, "b": 2}
    assert got.raw_metadata == {"_reserved": "backend", "a": 1, "b": 2}


def test_save_metadata_in_a_task_writes_at_once(r, make_worker, with_metadata):
    res = mt.save_metadata_explicitly.enqueue("a", 1)
    drain(make_worker, [res])
    assert res.return_value == {"metadata": {"a": 1}, "modified": False}
    assert saved(r, res) == {"a": 1}


def test_metadata_that_cannot_be_stored_fails_the_attempt_as_django_does_and_is_not_retried(r, make_worker, with_metadata):
    invalid = mt.set_invalid_metadata.enqueue()  # max_retries=3
    huge = mt.set_huge_metadata.enqueue()
    drain(make_worker, [invalid, huge])
    assert invalid.status == TaskResultStatus.FAILED and invalid.attempts == 1
    assert invalid.errors[0].exception_class is TypeError and "Unsupported type" in invalid.errors[0].traceback
    assert huge.status == TaskResultStatus.FAILED and huge.attempts == 1
    assert huge.errors[0].exception_class is ValueError and "METADATA_MAX_BYTES" in huge.errors[0].traceback
    assert where_is(r, invalid.id) == where_is(r, huge.id) == ["dead"]
    assert fresh(invalid).metadata == {} and saved(r, huge) is None


def test_a_message_with_metadata_that_is_not_an_object_is_dead_lettered(r, make_worker, with_metadata):
    res = mt.get_metadata.enqueue()
    r.hset(keys().task(res.id), "msg", json.dumps({"v": 1, "args": [], "kwargs": {}, "m": [1]}))
    drain(make_worker, [res])
    assert r.hget(keys().task(res.id), "reason") == "bad_message"
    assert "metadata must be an object" in r.hget(keys().task(res.id), "error")


def test_on_a_django_without_metadata_a_context_task_gets_djangos_context_and_nothing_is_saved(r, make_worker):
    if FRAMEWORK_HAS_METADATA:
        pytest.skip("the running Django has the metadata proposal")
    res = mt.update_metadata_and_fail.enqueue(b=2)
    drain(make_worker, [res])
    assert res.status == TaskResultStatus.FAILED and res.errors[0].exception_class is AttributeError
    assert saved(r, res) is None


# -- every pool ----------------------------------------------------------------


@pytest.mark.parametrize("pool", POOLS)
def test_every_pool_gives_tasks_their_metadata_and_saves_it(r, pool, with_metadata):
    ran = mt.update_metadata.using(metadata={"a": 1}).enqueue(b=2)
    failed = mt.update_metadata_and_fail.enqueue(b=2)
    counted = mt.count_attempts.enqueue()
    explicit = mt.save_metadata_explicitly.enqueue("k", "v")
    waited = mt.update_metadata_async.using(metadata={"a": 1}).enqueue(c=3)
    awaited = mt.asave_metadata_explicitly.enqueue("k", "w")
    with serving(pool):
        settled(ran, failed, counted, explicit, waited, awaited)
    assert ran.status == TaskResultStatus.SUCCESSFUL and fresh(ran).metadata == {"a": 1, "b": 2}
    if pool == "processes":
        assert ran.return_value["pid"] != os.getpid()  # it ran in a child, and its metadata came back
    assert failed.status == TaskResultStatus.FAILED and fresh(failed).metadata == {"b": 2}
    assert counted.return_value == 3 and fresh(counted).metadata == {"tries": 3}
    assert explicit.return_value == {"metadata": {"k": "v"}, "modified": False} and saved(r, explicit) == {"k": "v"}
    assert waited.status == TaskResultStatus.SUCCESSFUL and fresh(waited).metadata == {"a": 1, "c": 3}
    assert awaited.return_value == {"metadata": {"k": "w"}, "modified": False} and saved(r, awaited) == {"k": "w"}


# -- the worker's save proves it holds the task ---------------------------------


def test_a_worker_saves_metadata_only_while_it_holds_the_task(r, with_metadata):
    broker = Broker(get_options("default"))
    res = mt.update_metadata.enqueue()
    status = keys().status(res.id)
    assert broker.save_metadata_held("default", "me", [(res.id, '{"a":1}')]) == [res.id]  # no guard: not held
    r.set(status, "running:other")
    assert broker.save_metadata_held("default", "me", [(res.id, '{"a":1}')]) == [res.id]
    assert saved(r, res) is None
    r.set(status, "running:me")
    assert broker.save_metadata_held("default", "me", [(res.id, '{"a":2}')]) == []
    assert saved(r, res) == {"a": 2}
    r.delete(keys().task(res.id))
    assert broker.save_metadata_held("default", "me", [(res.id, '{"a":3}')]) == [res.id]
    assert not r.exists(keys().task(res.id))
