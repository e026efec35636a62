"""django-redisq: a reliable, fast task queue for Django on Redis."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django_redisq.exceptions import InvalidArguments, LeaseLost, RedisQError, RedisUnavailable, RedisUnreachable, Retry, TaskCancelled, TaskTimeout
from django_redisq.progress import Progress, report_progress
from django_redisq.task import RedisTask, task
from django_redisq.workflows.canvas import chain, chord, group

if TYPE_CHECKING:
    from django_redisq.compat import TaskResult
    from django_redisq.workflows.result import WorkflowResult


def cancel(task_id_or_result: str | TaskResult, *, backend: str = "default", who: str = "api") -> str:
    """Cancel a task; it is never retried. Returns what happened:

    ``"cancelled"`` (it was pending or scheduled: now a dead letter), ``"requested"`` (it is
    running: its worker stops it within about a second) or ``"finished"`` (already done or
    dead: nothing changed). ``TaskNotFound`` for an unknown id. Details in ``backend.cancel``,
    imported on the first call so that importing this package stays light.
    """
    from django_redisq.backend import cancel as cancel_task  # the backend pulls in the store and redis-py: not at `import django_redisq`

    return cancel_task(task_id_or_result, backend=backend, who=who)


def get_progress(task_id_or_result: str | TaskResult, *, backend: str = "default") -> Progress | None:
    """What a task last reported with ``report_progress`` (None: nothing yet); see ``backend.get_progress``."""
    from django_redisq.backend import get_progress as read  # as in cancel: keeps the package import light

    return read(task_id_or_result, backend=backend)


async def aget_progress(task_id_or_result: str | TaskResult, *, backend: str = "default") -> Progress | None:
    """``get_progress`` on the running event loop (no thread)."""
    from django_redisq.backend import aget_progress as aread  # as in cancel: keeps the package import light

    return await aread(task_id_or_result, backend=backend)


def get_workflow(workflow_id: str, *, backend: str = "default") -> WorkflowResult:
    """The workflow (``WorkflowResult``) with this id, read now; ``WorkflowNotFound`` if there is none (workflows/enqueue.py)."""
    from django_redisq.workflows.enqueue import get_workflow as find  # as in cancel: keeps the package import light

    return find(workflow_id, backend=backend)


__all__ = ["InvalidArguments", "LeaseLost", "Progress", "RedisQError", "RedisTask", "RedisUnavailable", "RedisUnreachable", "Retry",
           "TaskCancelled", "TaskTimeout",
           "aget_progress", "cancel", "chain", "chord", "get_progress", "get_workflow", "group", "report_progress", "task"]
