"""Tasks of the fault-injection test (tests/worker/test_fault_injection.py): each run is counted in Redis.

``faults:runs`` (HASH): task id -> runs begun; ``faults:log`` (LIST): ``start|<id>`` and ``end|<id>`` per run, in
order, so a test sees that a workflow step began only after each of its parents ended. The counts go to the
queue's Redis through a client of their own (tests/testapp/chaos_tasks.py ``effects_store``), never through the
worker's store, so a fault injected into that store cannot hide or fake a run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django_redisq import task
from tests.testapp.chaos_tasks import effects_store

RETRIES = 2
"""Every task here has ``max_retries=RETRIES``: it must end within RETRIES + 1 runs."""
NESTING = 5000
"""Depth of the nested list ``bad_result("nested")`` returns: deeper than the interpreter's recursion limit."""


@contextmanager
def _run(context: Any) -> Iterator[int]:
    """Count the run (its number is yielded) and log its start; its end is logged only if the body returned."""
    tid = context.task_result.id
    pipe = effects_store().pipeline(transaction=True)
    pipe.hincrby("faults:runs", tid, 1)
    pipe.rpush("faults:log", f"start|{tid}")
    run = int(pipe.execute()[0])
    yield run
    effects_store().rpush("faults:log", f"end|{tid}")


@task(takes_context=True, max_retries=RETRIES)
def ok(context: Any, n: int) -> int:
    with _run(context):
        return n


@task(takes_context=True, max_retries=RETRIES)
def plus(context: Any, n: int, more: int = 1) -> int:
    """A chain's later step: the previous step's result plus ``more``."""
    with _run(context):
        return n + more


@task(takes_context=True, max_retries=RETRIES)
def total(context: Any, values: list[int]) -> int:
    """A chord's callback."""
    with _run(context):
        return sum(values)


@task(takes_context=True, max_retries=RETRIES)
def flaky(context: Any, n: int) -> int:
    """Fails its first run, succeeds after."""
    with _run(context) as run:
        if run == 1:
            raise RuntimeError(f"designed failure of flaky({n})")
        return n


@task(takes_context=True, max_retries=RETRIES)
def fails(context: Any, n: int) -> None:
    """Always fails: a designed dead letter after RETRIES + 1 runs."""
    with _run(context):
        raise ValueError(f"designed permanent failure {n}")


def _bad(kind: str) -> Any:
    if kind == "surrogate":
        return "a\ud800b"  # what json.loads('"a\\ud800b"') gives from any outside JSON
    if kind == "surrogate_key":
        return {"k\udcff": 1}
    if kind == "object":
        return object()
    if kind == "oversized":
        return "x" * (2 * 1024 * 1024)  # twice the default RESULT_MAX_BYTES
    if kind == "nested":
        value: list[Any] = []
        for _ in range(NESTING):
            value = [value]
        return value
    raise ValueError(kind)


@task(takes_context=True, max_retries=RETRIES)
def bad_result(context: Any, kind: str) -> Any:
    """Returns a value that cannot be stored as JSON result (``kind`` says which)."""
    with _run(context):
        return _bad(kind)


@task(takes_context=True, max_retries=RETRIES)
def on_event(context: Any, payload: dict[str, Any], event_id: str) -> int:
    """A subscription's handler: counted like the others, by its task id."""
    with _run(context):
        return int(payload.get("n", 0))
