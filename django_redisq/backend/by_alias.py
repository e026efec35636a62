"""What takes a backend's alias rather than a backend: ``get_progress``, ``aget_progress``, ``cancel``.

Each finds its backend with ``workflows.port.backend_of``, the one way an alias
is resolved (the events and the workflow reads use it too).
"""

from __future__ import annotations

from typing import Any

from django_redisq.backend.wire import GetTask, Plan
from django_redisq.compat import DEFAULT_TASK_BACKEND_ALIAS, TaskResult, TaskResultDoesNotExist
from django_redisq.core.clock import ms_to_datetime
from django_redisq.progress import Progress
from django_redisq.progress import decode as decode_progress
from django_redisq.workflows.port import Backend, backend_of


def _target(task_id_or_result: str | TaskResult[Any, Any], backend: str, purpose: str) -> tuple[Backend, str]:
    """The backend and task id meant: a result's own backend, or ``backend`` for an id."""
    if isinstance(task_id_or_result, TaskResult):
        return backend_of(task_id_or_result.backend, purpose), task_id_or_result.id
    return backend_of(backend, purpose), task_id_or_result


def progress_plan(queues: list[str], task_id: str) -> Plan[Progress | None]:
    """``get_progress``: one read of the task hash, as ``get_result``."""
    if not isinstance(task_id, str) or not 0 < len(task_id) <= 64:
        raise TaskResultDoesNotExist(task_id)
    (found,) = yield [GetTask(task_id, queues)]
    if found is None or "msg" not in found[1]:
        raise TaskResultDoesNotExist(task_id)
    return decode_progress(found[1].get("progress"), ms_to_datetime(found[1].get("progress_at")))


def get_progress(task_id_or_result: str | TaskResult[Any, Any], *, backend: str = DEFAULT_TASK_BACKEND_ALIAS) -> Progress | None:
    """What the task last reported with ``report_progress`` (progress.py), or None if it reported nothing yet.

    By id (on ``backend``) or by its ``TaskResult`` (its own backend). ``TaskResultDoesNotExist``
    when there is no such task (or it expired); one read of the task hash, as ``get_result``.
    """
    found, task_id = _target(task_id_or_result, backend, "it stores no progress")
    return found.get_progress(task_id)


async def aget_progress(task_id_or_result: str | TaskResult[Any, Any], *, backend: str = DEFAULT_TASK_BACKEND_ALIAS) -> Progress | None:
    """``get_progress`` on the running event loop, with no thread (the async broker's read, as ``aget_result``)."""
    found, task_id = _target(task_id_or_result, backend, "it stores no progress")
    return await found.aget_progress(task_id)


def cancel(task_id_or_result: str | TaskResult[Any, Any], *, backend: str = DEFAULT_TASK_BACKEND_ALIAS, who: str = "api") -> str:
    """Cancel a task by id or by its ``TaskResult`` (whose own backend is used); it is never retried.

    A pending or scheduled task is dead-lettered at once (``"cancelled"``); a running one is
    stopped by its worker within about a second (``"requested"``); a finished or dead one is
    left alone (``"finished"``). A cancelled task's result is FAILED with a ``TaskCancelled``
    error, "cancelled by <who>", and it shows as a dead letter with reason ``cancelled``
    (replay runs it after all). Raises ``TaskNotFound`` for an id that is in none of the
    backend's queues, and ``InvalidTaskBackend`` for a backend that is not django_redisq's.
    """
    found, task_id = _target(task_id_or_result, backend, "it cannot cancel tasks")
    return found.cancel(task_id, who=who)
