"""Django's metadata proposal (new-features #141) for the tests, on a Django that lacks it, and tasks using it.

Released Django has no ``Task.metadata``, ``TaskResult.raw_metadata`` or
``TaskContext.metadata``; the stand-ins below add them the way Django's branch
does (``django/tasks/base.py`` there), and ``MetadataBackend`` is our backend
building them, so the tests run what a task written against the proposal's API
does on our worker, in every pool (a process-pool child imports this module
too). On a Django that has the proposal, the stand-ins are Django's own classes.

Tests select the backend with ``TASKS["default"]["BACKEND"] = BACKEND``.
"""

from __future__ import annotations

import asyncio
import os
from copy import deepcopy
from dataclasses import dataclass, field, replace
from typing import Any

from asgiref.sync import sync_to_async

from django_redisq.backend import RedisQueueBackend
from django_redisq.compat import FRAMEWORK_HAS_METADATA, InvalidTask, TaskContext, TaskResult, normalize_json
from django_redisq.core.metadata import RESERVED_PREFIX
from django_redisq.exceptions import Retry
from django_redisq.task import RedisTask

BACKEND = f"{__name__}.MetadataBackend"
TASK_FIELDS: dict[str, Any] = {"priority": 0, "backend": "default", "queue_name": "default", "run_after": None}


def user_metadata(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in raw.items() if not k.startswith(RESERVED_PREFIX)}


if FRAMEWORK_HAS_METADATA:  # the running Django has the proposal: test against its own classes
    MetadataResult: Any = TaskResult
    MetadataContext: Any = TaskContext
    MetadataTask: Any = RedisTask
else:

    @dataclass(frozen=True, slots=True, kw_only=True)
    class MetadataTask(RedisTask):  # type: ignore[no-redef]
        """A Task of a Django with metadata: ``Task.using(metadata=...)``, validated as Django validates it."""

        metadata: dict[str, Any] = field(default_factory=dict, hash=False)

        def __post_init__(self) -> None:
            RedisTask.__post_init__(self)
            if not isinstance(self.metadata, dict):
                raise InvalidTask("metadata must be a dict.")
            if not all(isinstance(k, str) for k in self.metadata):
                raise InvalidTask("metadata keys must be strings.")
            try:
                normalize_json(self.metadata)
            except (TypeError, ValueError) as e:
                raise InvalidTask(f"metadata must be JSON-serializable: {e}") from e

        def using(self, *, metadata: dict[str, Any] | None = None, **options: Any) -> MetadataTask:  # type: ignore[override]
            changed = RedisTask.using(self, **options)
            return replace(changed, metadata=metadata) if metadata is not None else changed  # type: ignore[return-value]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class MetadataResult(TaskResult):  # type: ignore[no-redef]
        """A TaskResult of a Django with metadata: ``raw_metadata``, and ``metadata`` without reserved keys."""

        raw_metadata: dict[str, Any] = field(default_factory=dict)

        @property
        def metadata(self) -> dict[str, Any]:
            return user_metadata(self.raw_metadata)

    @dataclass(frozen=True, slots=True, kw_only=True)
    class MetadataContext(TaskContext):  # type: ignore[no-redef]
        """A TaskContext of a Django with metadata: a mutable copy, ``metadata_modified``, ``(a)save_metadata()``."""

        metadata: dict[str, Any] = field(init=False)

        def __post_init__(self) -> None:
            object.__setattr__(self, "metadata", deepcopy(self.task_result.metadata))

        @property
        def metadata_modified(self) -> bool:
            return self.metadata != self.task_result.metadata

        def _to_save(self) -> dict[str, Any]:
            raw = {k: v for k, v in self.task_result.raw_metadata.items() if k.startswith(RESERVED_PREFIX)}
            raw.update(user_metadata(self.metadata))
            return normalize_json(raw)  # type: ignore[no-any-return]

        def save_metadata(self) -> None:
            raw = self._to_save()
            self.task_result.task.get_backend().save_metadata(self.task_result, raw)
            object.__setattr__(self.task_result, "raw_metadata", raw)

        async def asave_metadata(self) -> None:
            raw = self._to_save()
            await sync_to_async(self.task_result.task.get_backend().save_metadata, thread_sensitive=True)(self.task_result, raw)
            object.__setattr__(self.task_result, "raw_metadata", raw)


class MetadataBackend(RedisQueueBackend):
    """Our backend, building the stand-ins (what it does on a Django with the proposal)."""

    task_class = MetadataTask
    result_class = MetadataResult
    context_class = MetadataContext


# -- tasks (Django's tests/tasks/tasks.py has the same) ----------------------


def _update_metadata(context: Any, **values: Any) -> dict[str, Any]:
    context.metadata.update(values)
    return {"pid": os.getpid(), "attempt": context.attempt}


def _update_metadata_and_fail(context: Any, **values: Any) -> None:
    context.metadata.update(values)
    raise ValueError("Task failed after updating metadata")


def _count_attempts(context: Any) -> int:
    """Each attempt adds one to ``tries`` and fails, until the third: metadata outlives attempts."""
    tries = context.metadata.get("tries", 0) + 1
    context.metadata["tries"] = tries
    if tries < 3:
        raise Retry(delay=0)
    return tries


def _save_metadata_explicitly(context: Any, key: str, value: Any) -> dict[str, Any]:
    context.metadata[key] = value
    context.save_metadata()
    return {"metadata": context.task_result.metadata, "modified": context.metadata_modified}


async def _asave_metadata_explicitly(context: Any, key: str, value: Any) -> dict[str, Any]:
    context.metadata[key] = value
    await context.asave_metadata()
    await asyncio.sleep(0)
    return {"metadata": context.task_result.metadata, "modified": context.metadata_modified}


async def _update_metadata_async(context: Any, **values: Any) -> None:
    context.metadata.update(values)
    await asyncio.sleep(0)


def _get_metadata(context: Any) -> dict[str, Any]:
    return context.metadata  # type: ignore[no-any-return]


def _set_invalid_metadata(context: Any) -> None:
    context.metadata["invalid"] = {1, 2}


def _set_huge_metadata(context: Any) -> None:
    context.metadata["blob"] = "x" * 100_000


def _append_to_metadata_list(context: Any, key: str, value: Any) -> None:
    context.metadata[key].append(value)


def _make(func: Any, **options: Any) -> Any:
    return MetadataTask(func=func, takes_context=True, **TASK_FIELDS, **options)


update_metadata = _make(_update_metadata)
update_metadata_and_fail = _make(_update_metadata_and_fail, max_retries=1)
count_attempts = _make(_count_attempts, max_retries=5)
save_metadata_explicitly = _make(_save_metadata_explicitly)
asave_metadata_explicitly = _make(_asave_metadata_explicitly)
update_metadata_async = _make(_update_metadata_async)
get_metadata = _make(_get_metadata)
set_invalid_metadata = _make(_set_invalid_metadata, max_retries=3)
set_huge_metadata = _make(_set_huge_metadata, max_retries=3)
append_to_metadata_list = _make(_append_to_metadata_list)
