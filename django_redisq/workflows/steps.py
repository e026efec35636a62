"""One workflow step's ``TaskResult``, built from what a bounded read found (workflows/enqueue.py's ``WorkflowResult``).

A step is read from its task hash when it has one (queued, running, finished,
dead), else from its workflow's record (not queued yet: READY, or FAILED
saying why; SUCCESSFUL when done and its hash expired since). Either way its
task may no longer be registered (renamed or removed by a deploy while the
step waited): the result then carries an ``UnregisteredTask`` that names the
stored path, as the dead-letter pages show an ``unknown_task`` dead letter by
its path, instead of raising ``InvalidTask`` on a read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django_redisq.compat import InvalidTask, Task, TaskError, TaskResult, TaskResultStatus
from django_redisq.core.clock import ms_to_datetime
from django_redisq.core.states import STATE_TO_STATUS
from django_redisq.store.reads.errors import stored_errors
from django_redisq.workflows.port import Backend

STEP_NOT_RUN = "django_redisq.workflows.enqueue.StepNotRun"
UNREGISTERED = "task no longer registered: "
"""How a step whose task path no worker or web process registers is shown (admin, ``redisq workflow``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisteredTask(Task):
    """The task of a stored step whose path is no longer registered: its ``module_path`` is the stored path;
    calling or enqueueing it raises ``InvalidTask``. Never validated (there is nothing to validate against)."""

    def __post_init__(self) -> None:
        pass


def unregistered(path: str, queue: str, alias: str) -> UnregisteredTask:
    module, _, name = path.rpartition(".")

    def gone(*args: Any, **kwargs: Any) -> Any:
        raise InvalidTask(f"{UNREGISTERED}{path}")

    gone.__module__, gone.__qualname__, gone.__name__ = module or "?", name or path or "?", name or path or "?"
    return UnregisteredTask(func=gone, backend=alias, queue_name=queue)


def resolved(backend: Backend, path: str, queue: str) -> Task:
    """The registered task of ``path``, or an ``UnregisteredTask`` naming it."""
    try:
        return backend.resolve_task(path, queue)
    except InvalidTask:
        return unregistered(path, queue, backend.alias)


def from_hash(backend: Backend, task_id: str, queue: str, data: dict[str, str]) -> TaskResult:
    """``backend.build_result``, or for a task no longer registered the same fields with an ``UnregisteredTask``."""
    try:
        return backend.build_result(task_id, queue, data)
    except InvalidTask:
        pass
    try:
        msg = json.loads(data.get("msg") or "{}")
    except (ValueError, RecursionError):
        msg = {}
    msg = msg if isinstance(msg, dict) else {}
    status = STATE_TO_STATUS.get(data.get("state", ""), TaskResultStatus.READY)
    errors = [TaskError(exception_class_path=e["exc"], traceback=e["tb"] or e["msg"])
              for e in stored_errors(data.get("errors"), data.get("errors_dropped"))]
    result: TaskResult = backend.result_class(
        task=unregistered(data.get("task") or str(msg.get("task", "")), queue, backend.alias), id=task_id, status=status,
        enqueued_at=ms_to_datetime(data.get("enqueued_at")), started_at=ms_to_datetime(data.get("started_at")),
        finished_at=ms_to_datetime(data.get("finished_at") or data.get("died_at")),
        last_attempted_at=ms_to_datetime(data.get("last_attempted_at")),
        args=msg["args"] if isinstance(msg.get("args"), list) else [],
        kwargs=msg["kwargs"] if isinstance(msg.get("kwargs"), dict) else {},
        backend=backend.alias, errors=errors, worker_ids=[w for w in (data.get("workers") or "").split(",") if w])
    return result


def not_queued(backend: Backend, task_id: str, info: dict[str, Any], done: bool, why: str) -> TaskResult:
    """A step with no task hash: SUCCESSFUL when done (its hash expired since), FAILED when its workflow
    ended without it (``why``), READY otherwise (its parents are not all done)."""
    status = TaskResultStatus.READY
    errors: list[TaskError] = []
    if done:
        status = TaskResultStatus.SUCCESSFUL
    elif why:
        status = TaskResultStatus.FAILED
        errors = [TaskError(exception_class_path=STEP_NOT_RUN, traceback=f"not run: {why}")]
    result: TaskResult = backend.result_class(
        task=resolved(backend, str(info.get("t", "")), str(info.get("q", "default"))), id=task_id, status=status,
        enqueued_at=None, started_at=None, last_attempted_at=None, finished_at=None, args=[], kwargs={},
        backend=backend.alias, errors=errors, worker_ids=[])
    return result


def is_unregistered(result: TaskResult) -> bool:
    return isinstance(result.task, UnregisteredTask)
