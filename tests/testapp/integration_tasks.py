"""Tasks of the integration tests (progress, tracing, error reporting); named in the test settings' IMPORTS."""

from __future__ import annotations

import time
from typing import Any

from django_redisq import progress, report_progress, task
from tests.testapp.tasks import _effects


@task(max_retries=0)
def reports_then_waits(key: str, total: int) -> str:
    """Reports 3 of ``total``, waits until ``key`` is set in Redis (at most 30 s), then reports all done."""
    report_progress(3, total, message="row 3")
    deadline = time.monotonic() + 30
    while not _effects().exists(key) and time.monotonic() < deadline:
        time.sleep(0.01)
    report_progress(total, total, message="all rows")
    return "exported"


@task(max_retries=0)
def reports_in_a_tight_loop(n: int) -> dict[str, Any]:
    """Reports ``n`` times as fast as it can; returns how many writes its writer made by the end of the loop, and how long it took."""
    start = time.monotonic()
    for i in range(1, n + 1):
        report_progress(i, n + 1, message=f"step {i}")  # never done: each is held back within the interval
    writer: Any = progress.current.get()
    return {"writes": writer.writes, "elapsed": time.monotonic() - start}


@task(max_retries=1, backoff_base=0.01)
def reports_then_fails(key: str) -> None:
    """Reports on each attempt, fails the first."""
    attempt = int(_effects().incr(key))
    report_progress(attempt, 2, message=f"attempt {attempt}")
    if attempt == 1:
        raise RuntimeError("first attempt fails")


@task(max_retries=0)
async def reports_async(n: int) -> int:
    for i in range(1, n + 1):
        report_progress(i, n)
    return n


@task
def traced_inside() -> str:
    """The span current inside the task (the attempt's, where tracing is on): what its instrumented code would be a child of."""
    from opentelemetry import trace

    return format(trace.get_current_span().get_span_context().span_id, "016x")


@task
def enqueues_next(x: int) -> str:
    """Enqueues another task from inside its attempt, as a workflow's step would; returns the new task's id."""
    from tests.testapp.tasks import add

    return add.delay(x, 1).id

