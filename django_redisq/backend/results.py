"""Reading a task back: the plan of ``get_result`` / ``aget_result`` and a ``TaskResult`` built from a task hash."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from django_redisq.backend.wire import GetTask, Plan
from django_redisq.compat import InvalidTask, TaskError, TaskResult, TaskResultDoesNotExist, TaskResultStatus
from django_redisq.core import partitions
from django_redisq.core.clock import ms_to_datetime
from django_redisq.core.message import OVERRIDES
from django_redisq.core.metadata import attach, stored
from django_redisq.core.states import STATE_TO_STATUS
from django_redisq.store.reads.errors import stored_errors
from django_redisq.store.reads.priority import stored_priority
from django_redisq.task import RedisTask
from django_redisq.workflows.enqueue import waiting_result
from django_redisq.workflows.port import Backend


def valid_id(task_id: object) -> str:
    """``task_id`` if it can name a task (a string of 1 to 64 characters); ``TaskResultDoesNotExist`` otherwise."""
    if not isinstance(task_id, str) or not 0 < len(task_id) <= 64:
        raise TaskResultDoesNotExist(task_id)
    return task_id


def result_plan(backend: Backend, result_id: str) -> Plan[TaskResult]:
    """``get_result``: one read of the task hash; a workflow step not queued yet is read from its workflow."""
    (found,) = yield [GetTask(valid_id(result_id), sorted(backend.queues))]
    if found is None or "msg" not in found[1]:
        if (waiting := waiting_result(backend, result_id)) is not None:
            return waiting
        raise TaskResultDoesNotExist(result_id)
    return backend.build_result(result_id, found[0], found[1])


def build_result(backend: Backend, task_id: str, queue: str, data: dict[str, str]) -> TaskResult:
    """A ``TaskResult`` from a task hash: the task as it was enqueued, its status, times, errors and return value."""
    try:
        msg = json.loads(data["msg"])
    except (ValueError, RecursionError):
        msg = None
    if not isinstance(msg, dict):
        msg = {}  # a message that does not decode: the worker dead-letters it; show the rest
    task = backend.resolve_task(data.get("task") or msg.get("task", ""), partitions.logical(queue))
    priority = stored_priority(data.get("prio"))
    if priority != task.priority:
        task = task.using(priority=priority)
    over = msg.get("o")
    if isinstance(task, RedisTask) and isinstance(over, dict) and over and set(over) <= set(OVERRIDES):
        try:  # the task as it was enqueued (task.using(max_retries=...)), as Django's backends return it
            changes: dict[str, Any] = {"max_attempts": None, **over} if "max_retries" in over else dict(over)
            task = dataclasses.replace(task, **changes)
        except InvalidTask:
            pass  # a value this version refuses: the registered task's own options, as the worker uses
    errors = [
        TaskError(exception_class_path=e["exc"], traceback=e["tb"] or e["msg"])
        for e in stored_errors(data.get("errors"), data.get("errors_dropped"))
    ]
    workers = [w for w in (data.get("workers") or "").split(",") if w]
    status = STATE_TO_STATUS.get(data.get("state", ""), TaskResultStatus.READY)
    result: TaskResult = backend.result_class(
        task=task, id=task_id, status=status,
        enqueued_at=ms_to_datetime(data.get("enqueued_at")),
        started_at=ms_to_datetime(data.get("started_at")),
        finished_at=ms_to_datetime(data.get("finished_at") or data.get("died_at")),
        last_attempted_at=ms_to_datetime(data.get("last_attempted_at")),
        args=msg.get("args", []) if isinstance(msg.get("args"), list) else [],
        kwargs=msg.get("kwargs", {}) if isinstance(msg.get("kwargs"), dict) else {}, backend=backend.alias,
        errors=errors, worker_ids=workers,
    )
    attach(result, stored(data.get("metadata"), msg.get("m")))
    if status == TaskResultStatus.SUCCESSFUL and "result" in data:
        try:
            object.__setattr__(result, "_return_value", json.loads(data["result"]))
        except (ValueError, RecursionError):
            object.__setattr__(result, "_return_value", data["result"])
    return result
