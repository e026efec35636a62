"""Tasks written against Django's retry proposal (new-features #142): ``max_attempts`` and a ``backoff`` function."""

from __future__ import annotations

from typing import Any

from django_redisq import task
from django_redisq.compat import task as framework_task
from django_redisq.exceptions import Retry

SEEN: list[tuple[str, str, int, list[str]]] = []
"""What ``recording_backoff`` was given: exception class, the result's status, attempts, its errors' classes."""


def linear_backoff(exception: BaseException, task_result: Any) -> int | None:
    """The proposal's example (30 s there; no wait here)."""
    return 0


def recording_backoff(exception: BaseException, task_result: Any) -> float | None:
    SEEN.append((type(exception).__name__, str(task_result.status), task_result.attempts,
                 [e.exception_class_path for e in task_result.errors]))
    return None if isinstance(exception, PermissionError) else 0.0


def negative_backoff(exception: BaseException, task_result: Any) -> int:
    return -1


def text_backoff(exception: BaseException, task_result: Any) -> str:
    return "soon"


def raising_backoff(exception: BaseException, task_result: Any) -> int:
    raise KeyError("no delay for you")


@framework_task(max_attempts=3, backoff=linear_backoff)
def framework_fails() -> None:
    """Decorated with the framework's own ``@task``, as the proposal's example is."""
    raise ValueError("always")


@task(max_attempts=5, backoff=recording_backoff)
def fails_with(kind: str) -> None:
    raise PermissionError("for good") if kind == "permanent" else ConnectionError("for now")


@task(max_attempts=4, backoff=recording_backoff)
def asks_to_retry(times: int, context_free: bool = True) -> str:
    if len(SEEN) < times:
        raise Retry()
    return "done"


@task(max_attempts=3, backoff=negative_backoff)
def bad_negative() -> None:
    raise ValueError("the task's own failure")


@task(max_attempts=3, backoff=text_backoff)
def bad_text() -> None:
    raise ValueError("the task's own failure")


@task(max_attempts=3, backoff=raising_backoff)
def bad_raising() -> None:
    raise ValueError("the task's own failure")
