"""Django's metadata proposal (new-features #141), where the running Django has it.

Released Django has no ``Task.metadata`` or ``TaskResult.raw_metadata``; the
stand-ins below add those fields the way Django's branch does, so what our
backend stores and returns is tested on every Django we support.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from django_redisq import backend as backend_module
from django_redisq.compat import TaskResult, TaskResultDoesNotExist, task_backends
from django_redisq.task import RedisTask
from tests.helpers import keys
from tests.test_contract import TASK_FIELDS
from tests.testapp import contract_tasks as ct


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataTask(RedisTask):
    """Stands in for a Task of a Django with metadata: ``Task.using(metadata=...)``."""

    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResult(TaskResult):
    """Stands in for a TaskResult of a Django with metadata (``raw_metadata``)."""

    raw_metadata: dict[str, Any] = field(default_factory=dict)


@pytest.fixture
def with_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend_module, "TaskResult", MetadataResult)


def test_the_backend_says_it_supports_metadata():
    assert task_backends["default"].supports_metadata is True


def test_metadata_is_stored_with_the_task_and_returned(r, with_metadata):
    task = MetadataTask(func=ct.ours_add.func, **TASK_FIELDS, metadata={"trace_id": 123, "tags": ("a", "b")})
    result = task.enqueue(1, 2)
    assert json.loads(r.hget(keys().task(result.id), "msg"))["m"] == {"trace_id": 123, "tags": ["a", "b"]}
    assert ct.ours_add.get_result(result.id).raw_metadata == {"trace_id": 123, "tags": ["a", "b"]}  # type: ignore[attr-defined]


def test_saved_metadata_replaces_the_enqueued_one(r, with_metadata):
    backend = task_backends["default"]
    result = MetadataTask(func=ct.ours_add.func, **TASK_FIELDS, metadata={"a": 1}).enqueue(1, 2)
    backend.save_metadata(result, {"a": 1, "b": (2,)})  # type: ignore[attr-defined]
    assert ct.ours_add.get_result(result.id).raw_metadata == {"a": 1, "b": [2]}  # type: ignore[attr-defined]


def test_no_metadata_reads_as_empty_and_nothing_is_stored(r, with_metadata):
    result = ct.ours_add.enqueue(1, 2)
    assert "m" not in json.loads(r.hget(keys().task(result.id), "msg"))
    assert ct.ours_add.get_result(result.id).raw_metadata == {}  # type: ignore[attr-defined]


def test_metadata_of_a_task_that_is_gone_writes_nothing(r):
    result = ct.ours_add.enqueue(1, 2)
    r.delete(keys().task(result.id))
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].save_metadata(result, {"a": 1})  # type: ignore[attr-defined]
    assert not r.exists(keys().task(result.id))


def test_a_django_without_metadata_gets_results_as_before(r):
    result = MetadataTask(func=ct.ours_add.func, **TASK_FIELDS, metadata={"a": 1}).enqueue(1, 2)
    fresh = ct.ours_add.get_result(result.id)
    assert type(fresh) is TaskResult and fresh.args == [1, 2]
