"""What became of one attempt, and the policy that decides it: success, retry or dead letter.

Every pool returns an ``Outcome`` for each delivery it ran, whether the task
finished, raised, ran out of time, was cancelled or lost its process; the
settler turns it into an ack, a retry or a burial. ``failure`` is the one
place that decides whether a failed attempt is retried, so a timeout on a
thread and a hard kill in a child follow the same rules.
"""

from __future__ import annotations

import inspect
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import asgiref

from django_redisq.compat import Task, TaskResultStatus
from django_redisq.core.backoff import call_backoff, compute_backoff
from django_redisq.core.options import Options
from django_redisq.exceptions import InvalidBackoff, RedisQError, Retry, Suspended, TaskCancelled, TaskTimeout, WorkerLost
from django_redisq.store.steps.replies import Delivery
from django_redisq.task import RedisTask

MAX_TRACEBACK = 32 * 1024
SUCCESS, RETRY, DEAD, SUSPEND = "success", "retry", "dead", "suspend"
"""``SUSPEND``: a durable task's sleep or wait ended the attempt (django_redisq/durable/): not a failure."""


@dataclass(slots=True)
class Outcome:
    kind: str  # SUCCESS, RETRY, DEAD or SUSPEND
    result_json: str = "null"
    error: dict[str, Any] = field(default_factory=dict)
    delay_ms: int = 0
    reason: str = ""
    failed: bool = False  # the task ran and raised (counts as a failed attempt)
    task_name: str = ""
    duration: float = 0.0
    metadata: str | None = None  # the task's metadata as JSON, to save before settling; None: unchanged (core/metadata.py)
    step: str = ""  # SUSPEND: the sleep's or wait's step name, whose record says until when (suspend.lua)
    trace_from: str = ""  # the attempt's span as a traceparent (core/tracing.py): what the workflow steps it releases link to


_RUNNER_FILES = tuple(
    str(Path(p).resolve().parent)
    for p in (__file__, inspect.getfile(Task), asgiref.__file__)
)
"""Where the frames that call a task live: this package's worker, Django's ``Task.call``, asgiref's sync/async bridges."""


def from_user_code(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without its leading frames of the worker and the frameworks that call the task.

    A task's traceback then starts at the task's own function, as when it is called
    directly. One that never reached the user's code keeps its last frame.
    """
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.startswith(_RUNNER_FILES):
        tb = tb.tb_next
    return tb


def error_dict(exc: BaseException | None, message: str = "", exc_path: str = "", *, user_code: bool = False) -> dict[str, Any]:
    """The stored error of an attempt; ``user_code``: a task's exception, whose traceback starts at the task (``from_user_code``)."""
    if exc is not None:
        kind = type(exc)
        exc_path = f"{kind.__module__}.{kind.__qualname__}"
        message = str(exc)
        tb_start = from_user_code(exc.__traceback__) if user_code else exc.__traceback__
        tb = "".join(traceback.format_exception(kind, exc, tb_start))
    else:
        tb = message
    if len(tb) > MAX_TRACEBACK:
        tb = tb[: MAX_TRACEBACK // 2] + "\n[... truncated ...]\n" + tb[-MAX_TRACEBACK // 2 :]
    return {"exc": exc_path, "msg": message[:2000], "tb": tb, "at": int(time.time() * 1000)}


def failure(task: Task, exc: BaseException, d: Delivery, max_retries: int, opts: Options,
            over: dict[str, Any] | None = None, *, retry: bool = True, result: Any = None,
            error: dict[str, Any] | None = None) -> Outcome:
    """The outcome of an attempt that raised ``exc``: a retry after a backoff, or a dead letter with the reason.

    - ``Retry``: retried (after its ``delay`` if given) while retries are left.
    - ``TaskTimeout`` and ``WorkerLost``: retried unless the task lists them in
      ``no_retry_on``; dead with reason ``timeout`` / ``worker_lost`` once out of retries.
    - ``TaskCancelled``: never retried, reason ``cancelled``.
    - other exceptions: by the task's ``retry_on`` / ``no_retry_on``; any other
      ``RedisQError`` (a result that is not JSON) is not retried, retrying cannot help.
    - ``retry=False`` (the task ran but its result cannot be stored): never retried.

    The delay is ``Retry``'s ``delay`` if given, else the task's ``backoff``
    function's answer for ``(exc, result)`` (None: not retried, reason
    ``not_retryable``; a bad answer: dead with reason ``bad_backoff``), else
    ``compute_backoff`` of the task's or the queue's base and cap. ``error`` is
    ``error_dict(exc)`` when the caller has it already.
    """
    error = error or error_dict(exc)
    if isinstance(exc, TaskCancelled):  # someone's decision, not a failed attempt
        return Outcome(DEAD, error=error, reason="cancelled")
    failures = d.failures + 1
    retryable = isinstance(exc, Retry)
    if isinstance(exc, TaskTimeout | WorkerLost):
        retryable = not (isinstance(task, RedisTask) and isinstance(exc, task.no_retry_on))
    elif not retryable and isinstance(task, RedisTask):
        retryable = isinstance(exc, task.retry_on) and not isinstance(exc, task.no_retry_on)
    elif not retryable:
        retryable = isinstance(exc, Exception)
    if (isinstance(exc, RedisQError) and not isinstance(exc, Retry | WorkerLost)) or not retry:
        retryable = False
    if retryable and failures <= max_retries:
        backoff = getattr(task, "backoff", None)
        if isinstance(exc, Retry) and exc.delay is not None:
            delay = int(exc.delay * 1000)
        elif backoff is not None:
            try:
                asked = call_backoff(backoff, exc, result)
            except InvalidBackoff as problem:
                return Outcome(DEAD, error=error_dict(problem), reason="bad_backoff", failed=True)
            if asked is None:
                return Outcome(DEAD, error=error, reason="not_retryable", failed=True)
            delay = asked
        else:
            over = over or {}
            base = task.backoff_base if isinstance(task, RedisTask) and task.backoff_base is not None else opts.backoff_base
            cap = task.backoff_max if isinstance(task, RedisTask) and task.backoff_max is not None else opts.backoff_max
            base, cap = over.get("backoff_base", base), over.get("backoff_max", cap)
            delay = compute_backoff(failures, base, cap)
        return Outcome(RETRY, error=error, delay_ms=delay, failed=True)
    if isinstance(exc, TaskTimeout):
        reason = "timeout"
    elif isinstance(exc, WorkerLost):
        reason = "worker_lost"
    else:
        reason = "failed" if retryable or failures > max_retries else "not_retryable"
    return Outcome(DEAD, error=error, reason=reason, failed=True)


def suspension(exc: Suspended, result: Any, task_name: str, duration: float, metadata: str | None) -> Outcome:
    """The outcome of an attempt a durable sleep or wait ended: not failed; the task is READY again (suspend.lua)."""
    object.__setattr__(result, "status", TaskResultStatus.READY)
    return Outcome(SUSPEND, reason=exc.kind, step=exc.step, task_name=task_name, duration=duration, metadata=metadata)
