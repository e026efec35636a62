"""The one place that knows which Tasks framework and which Python are in use.

Django 6.0+ ships the Tasks framework as ``django.tasks``; on Django 5.2 the
``django-tasks`` backport (``django_tasks``, 0.12 or newer) provides the same
classes under another root, with a few names spelled differently
(``InvalidTaskError``) and its own signal objects and logger. Everything in
django_redisq (and its tests) imports these names from here, never from
either framework, so the backend, the worker and the signals they send are
always the ones the user's ``@task`` and ``TaskResult`` come from. The choice
follows django-tasks-db: the built-in framework wins when it exists, because
Django 6's own ``task_backends`` is then what ``django.tasks.task`` uses.

Python 3.10 lacks ``datetime.UTC``, ``asyncio.timeout`` and
``asyncio.Task.uncancel``; the small stand-ins below behave like them for the
way the runner uses them, and are the standard ones from Python 3.11 on.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import fields
from datetime import timezone
from importlib.util import find_spec
from types import TracebackType
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

UTC = timezone.utc

if TYPE_CHECKING or find_spec("django.tasks") is not None:
    from django.tasks import (
        DEFAULT_TASK_BACKEND_ALIAS,
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskResult,
        TaskResultStatus,
        checks,
        task,
        task_backends,
    )
    from django.tasks import signals as _signals
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import DEFAULT_TASK_PRIORITY, TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, TaskError
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    FRAMEWORK = "django.tasks"
else:
    try:
        from django_tasks import (
            DEFAULT_TASK_BACKEND_ALIAS,
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            checks,  # registers the framework's system check, as importing django.tasks does
            task,
            task_backends,
        )
    except ImportError:
        raise ImportError(
            "django-redisq needs Django's Tasks framework: Django 6.0 or newer, or on Django 5.2 "
            'the django-tasks backport (pip install "django-redisq[django52]").'
        ) from None
    from django_tasks import signals as _signals
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import DEFAULT_TASK_PRIORITY, TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, Task, TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    try:  # the names of django.tasks; the backport's main branch renamed its classes to them
        from django_tasks.exceptions import InvalidTask, InvalidTaskBackend
    except ImportError:
        from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
        from django_tasks.exceptions import InvalidTaskError as InvalidTask

    FRAMEWORK = "django_tasks"

LOOP_SAFE_RECEIVERS: frozenset[object] = frozenset(
    r for r in (getattr(_signals, "log_task_enqueued", None),) if r is not None
)
"""The framework's own ``task_enqueued`` receivers that only log: ``aenqueue`` calls them on the event loop (store/broker/async_broker.py)."""

LOGGER_NAME = FRAMEWORK
"""The logger the framework's own signal receivers write to ("django.tasks" or "django_tasks")."""

FRAMEWORK_HAS_METADATA = any(f.name == "raw_metadata" for f in fields(TaskResult))
"""Whether the framework has Django's metadata proposal (new-features #141): no release does yet.

The engine decides by the classes it is given (``metadata.supported``), so a
backend that builds other result classes (the tests' stand-ins) is served too.
"""


class _Timeout:
    """``asyncio.timeout`` for Python 3.10: cancel the current task after ``delay`` seconds.

    Leaving the block after the deadline turns the cancellation into ``TimeoutError``
    and ``expired()`` is true, as with the standard one.
    """

    def __init__(self, delay: float | None) -> None:
        self._delay = delay
        self._expired = False
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[Any] | None = None

    def expired(self) -> bool:
        return self._expired

    def _expire(self) -> None:
        self._expired = True
        if self._task is not None:
            self._task.cancel()

    async def __aenter__(self) -> _Timeout:
        self._task = asyncio.current_task()
        if self._delay is not None:
            self._handle = asyncio.get_running_loop().call_later(self._delay, self._expire)
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._expired and kind is asyncio.CancelledError:
            raise TimeoutError from exc


def uncancel(task: asyncio.Task[Any]) -> None:
    """Undo one ``cancel()`` request (Python 3.11+); Python 3.10 keeps no count, so nothing to undo."""
    if sys.version_info >= (3, 11):
        task.uncancel()


if sys.version_info >= (3, 11):
    timeout = asyncio.timeout
else:
    timeout = _Timeout

__all__ = [
    "DEFAULT_TASK_BACKEND_ALIAS",
    "DEFAULT_TASK_PRIORITY",
    "DEFAULT_TASK_QUEUE_NAME",
    "FRAMEWORK",
    "FRAMEWORK_HAS_METADATA",
    "LOGGER_NAME",
    "LOOP_SAFE_RECEIVERS",
    "TASK_MAX_PRIORITY",
    "TASK_MIN_PRIORITY",
    "UTC",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "checks",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
    "timeout",
    "uncancel",
]


def prometheus() -> Any:
    """The ``prometheus_client`` module, or a clear error naming the extra that installs it."""
    try:
        import prometheus_client  # an optional extra (metrics): imported where metrics are served
    except ImportError:
        raise ImproperlyConfigured("metrics need prometheus-client: pip install 'django-redisq[metrics]'") from None
    return prometheus_client
