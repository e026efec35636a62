"""``ready_result`` (backend/sending.py): the READY result of a call built field by field, equal to Django's own."""

from __future__ import annotations

import dataclasses
from typing import Any

from django_redisq.backend.sending import ready_result
from django_redisq.compat import TaskResult, TaskResultStatus
from tests.testapp import tasks


def ordinary(cls: type[TaskResult], args: list[Any], kwargs: dict[str, Any]) -> TaskResult:
    return cls(task=tasks.add, id="x1", status=TaskResultStatus.READY, enqueued_at=None, started_at=None, last_attempted_at=None,
               finished_at=None, args=args, kwargs=kwargs, backend="default", errors=[], worker_ids=[])


def test_it_equals_the_result_djangos_init_builds():
    fast = ready_result(TaskResult, tasks.add, "x1", [1, 2], {"k": "v"}, "default")
    slow = ordinary(TaskResult, [1, 2], {"k": "v"})
    assert fast == slow
    for f in dataclasses.fields(TaskResult):
        assert getattr(fast, f.name) == getattr(slow, f.name), f.name
    assert fast.status == TaskResultStatus.READY and fast.errors == [] and fast.errors is not slow.errors


def test_a_class_of_its_own_is_built_the_ordinary_way():
    """A project's subclass with a ``__post_init__`` of its own (or a field we do not know) gets its ``__init__`` run."""
    seen: list[str] = []

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Audited(TaskResult):  # type: ignore[misc]
        def __post_init__(self) -> None:
            seen.append(self.id)
            TaskResult.__post_init__(self)

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Tagged(TaskResult):  # type: ignore[misc]
        tag: str = "t"

    result = ready_result(Audited, tasks.add, "x1", [1], {}, "default")
    assert seen == ["x1"] and result == ordinary(Audited, [1], {})
    tagged = ready_result(Tagged, tasks.add, "x1", [1], {}, "default")
    assert isinstance(tagged, Tagged) and tagged.tag == "t"
