"""Tasks for tests/backend/test_contract.py: what Django's own Tasks tests run, on our backend.

``framework_add`` is decorated with the framework's ``@task`` (``django.tasks``
on Django 6, the ``django_tasks`` backport on 5.2), ``ours_add`` with ours:
both must run on our worker.
"""

from __future__ import annotations

import datetime
from typing import Any

from django_redisq import task
from django_redisq.compat import task as framework_task


@framework_task
def framework_add(a: int, b: int) -> int:
    return a + b


@task
def ours_add(a: int, b: int) -> int:
    return a + b


@task(max_retries=3)
def returns_datetime() -> datetime.datetime:
    """Django's tests/tasks: a task whose return value is not JSON fails with TypeError."""
    return datetime.datetime.now(datetime.timezone.utc)


@task
def returns_tuple() -> tuple[int, int]:
    return (1, 2)


@task(max_retries=3)
def raises_base(kind: str) -> None:
    raise KeyboardInterrupt if kind == "keyboard" else SystemExit(3)


@task(max_retries=3)
async def araises_base(kind: str) -> None:
    raise KeyboardInterrupt if kind == "keyboard" else SystemExit(3)


@task(takes_context=True)
def context_seen(context: Any) -> dict[str, Any]:
    r = context.task_result
    return {"attempt": context.attempt, "status": str(r.status), "workers": len(r.worker_ids),
            "same_start": r.started_at == r.last_attempted_at}


@task(max_attempts=3, backoff_base=0.001, backoff_max=0.001)
def attempts_three() -> None:
    raise ValueError("always")
