"""The port between the backend and what runs on it: exactly what the workflow engine, its reads, the events and the
functions that take an alias (``cancel``, ``get_progress``) need of a django_redisq backend, and ``backend_of``, the
one way to find the backend of an alias.

The backend (django_redisq/backend/) sits above the workflows and implements this
protocol; the workflows are typed against it and never import the backend, so
there is no cycle to hide and no ``Any`` collaborator.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, ClassVar, Protocol, cast

from django_redisq.compat import InvalidTaskBackend, Task, TaskResult, task_backends
from django_redisq.core.options import Options
from django_redisq.progress import Progress
from django_redisq.store.broker import Broker
from django_redisq.workflows.engine import WorkflowEngine


class Backend(Protocol):
    """A django_redisq backend, as the workflow engine, the workflow reads and the events use it."""

    is_redisq_backend: ClassVar[bool]
    """True on the class: how ``find_backend`` tells ours from another backend in one attribute read (a
    ``runtime_checkable`` isinstance would test every member on every call, and on Python < 3.12 evaluate the
    lazy properties, connecting to Redis to answer a type question)."""
    alias: str
    result_class: type[TaskResult]

    @property
    def queues(self) -> Collection[str]:
        """The queue names of ``TASKS[alias]["QUEUES"]``."""

    @property
    def conf(self) -> Options:
        """The backend's options (``TASKS[alias]["OPTIONS"]``, checked)."""

    @property
    def broker(self) -> Broker:
        """Its store's steps, on its connection."""

    @property
    def workflows(self) -> WorkflowEngine:
        """Its workflow engine, on its broker."""

    def validated(self, task: Task) -> None:
        """``validate_task`` once per task object: ``InvalidTask`` for a task this backend cannot run."""

    def bind(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """``InvalidArguments`` for arguments that cannot bind to the task's function."""

    def overrides(self, task: Task) -> dict[str, Any]:
        """What ``task.using(...)`` changed from the registered task: it travels in the message (``o``)."""

    def resolve_task(self, path: str, queue: str) -> Task:
        """The registered task of a stored path, on ``queue``; ``InvalidTask`` if none is registered."""

    def build_result(self, task_id: str, queue: str, data: dict[str, str]) -> TaskResult:
        """A ``TaskResult`` from a task hash."""

    def cancel(self, result_id: str, who: str = "api") -> str:
        """Cancel one task of this backend by id: ``cancelled``, ``requested`` or ``finished``."""

    def get_progress(self, task_id: str) -> Progress | None:
        """What the task last reported with ``report_progress``; ``TaskResultDoesNotExist`` for no such task."""

    async def aget_progress(self, task_id: str) -> Progress | None:
        """``get_progress`` on the running event loop."""


def find_backend(alias: str) -> Backend | None:
    """The django_redisq backend of ``alias``, or None when ``TASKS[alias]`` is another backend."""
    found = task_backends[alias]
    return cast(Backend, found) if getattr(type(found), "is_redisq_backend", False) else None


def backend_of(alias: str, purpose: str) -> Backend:
    """The django_redisq backend of ``alias``; ``InvalidTaskBackend`` saying it cannot ``purpose`` otherwise."""
    found = find_backend(alias)
    if found is None:
        raise InvalidTaskBackend(f"TASKS[{alias!r}] is not a django_redisq backend: {purpose}")
    return found
