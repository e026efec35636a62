"""Run one delivered task and decide what becomes of it.

This is the replaceable unit of execution: the worker hands a ``Delivery`` to
``Runner.run`` and settles the returned ``Outcome`` with the broker. A runner
that executes in a child process (for hard timeouts) needs only to return the
same ``Outcome``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from django.db import close_old_connections
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json

from .backend import ms_to_datetime
from .backoff import compute_backoff
from .broker import Delivery
from .conf import Options
from .exceptions import BadMessage, InvalidArguments, RedisQError, Retry, TaskTimeout, UnknownSchema
from .message import Message, decode, dumps
from .task import RedisTask, get_registered
from .timelimit import arm, disarm

logger = logging.getLogger("django_redisq")

MAX_TRACEBACK = 32 * 1024
CRASH_ALLOWANCE = 10
"""Deliveries beyond max_retries + 1 (each a worker dying mid-task) before a task is dead-lettered."""

SUCCESS, RETRY, DEAD = "success", "retry", "dead"


@dataclass(frozen=True, slots=True)
class Prepared:
    """What each run of one task on one queue needs, worked out once."""

    task: Task
    params: inspect.Signature
    sender: type
    max_retries: int | None
    timeout: float | None
    is_async: bool


@dataclass(slots=True)
class Outcome:
    kind: str  # SUCCESS, RETRY or DEAD
    result_json: str = "null"
    error: dict[str, Any] = field(default_factory=dict)
    delay_ms: int = 0
    reason: str = ""
    failed: bool = False  # the task ran and raised (counts as a failed attempt)
    task_name: str = ""
    duration: float = 0.0


def error_dict(exc: BaseException | None, message: str = "", exc_path: str = "") -> dict[str, Any]:
    if exc is not None:
        kind = type(exc)
        exc_path = f"{kind.__module__}.{kind.__qualname__}"
        message = str(exc)
        tb = "".join(traceback.format_exception(exc))
    else:
        tb = message
    if len(tb) > MAX_TRACEBACK:
        tb = tb[: MAX_TRACEBACK // 2] + "\n[... truncated ...]\n" + tb[-MAX_TRACEBACK // 2 :]
    return {"exc": exc_path, "msg": message[:2000], "tb": tb, "at": int(time.time() * 1000)}


def _close_connections() -> None:
    """Close database connections past their lifetime; a broken database must not end the worker."""
    try:
        close_old_connections()
    except Exception:
        logger.exception("closing old database connections failed")


class Runner:
    """Runs tasks in the calling thread."""

    def __init__(self, options: Options, backend_alias: str) -> None:
        self.options = options
        self.alias = backend_alias
        self._tasks: dict[tuple[str, str], Prepared] = {}

    def _prepared(self, message: Message) -> Prepared:
        """The task of a message with what each run needs, worked out once per task and queue."""
        key = (message.task, message.queue)
        found = self._tasks.get(key)
        if found is None:
            registered = get_registered(message.task)
            if registered is None:
                raise BadMessage(
                    "unknown_task",
                    f"{message.task!r} is not a registered task in this worker "
                    "(is it in an app's tasks.py, and is the worker's code up to date?)",
                )
            task: Task = registered
            if registered.queue_name != message.queue or registered.backend != self.alias:
                task = registered.using(queue_name=message.queue, backend=self.alias)
            mine = isinstance(task, RedisTask)
            found = self._tasks[key] = Prepared(
                task, inspect.signature(task.func), type(task.get_backend()),
                task.max_retries if mine else None, task.timeout if mine else None,  # type: ignore[attr-defined]
                inspect.iscoroutinefunction(task.func),
            )
        return found

    def run(self, d: Delivery, worker_id: str) -> Outcome:
        opts = self.options.for_queue(d.queue)
        try:
            message = decode(d.raw, d.task, d.queue)
            prep = self._prepared(message)
            task, params, sender = prep.task, prep.params, prep.sender
            call_args = [None, *message.args] if task.takes_context else message.args
            try:
                params.bind(*call_args, **message.kwargs)
            except TypeError as exc:
                raise BadMessage("bad_arguments", f"arguments do not fit {message.task}{params}: {exc}") from None
        except UnknownSchema as exc:
            return Outcome(DEAD, error=error_dict(None, str(exc), "django_redisq.exceptions.UnknownSchema"), reason="unknown_schema")
        except BadMessage as exc:
            return Outcome(DEAD, error=error_dict(None, exc.detail, "django_redisq.exceptions.BadMessage"), reason=exc.reason)
        except Exception as exc:  # noqa: BLE001 - a task that cannot even be built (settings drift)
            return Outcome(DEAD, error=error_dict(exc), reason="bad_message")

        over = message.overrides  # from task.using(...) at enqueue; they win over the registered task's
        max_retries = over.get("max_retries", opts.max_retries if prep.max_retries is None else prep.max_retries)
        limit = over.get("timeout", opts.timeout if prep.timeout is None else prep.timeout)
        if d.deliveries > max_retries + 1 + CRASH_ALLOWANCE:
            return Outcome(
                DEAD, reason="too_many_deliveries", task_name=message.task,
                error=error_dict(None, f"delivered {d.deliveries} times without finishing (does it kill its worker?)",
                                 "django_redisq.exceptions.TooManyDeliveries"),
            )
        workers = d.workers.split(",") if d.workers else [worker_id]
        result: TaskResult = TaskResult(
            task=task, id=d.id, status=TaskResultStatus.RUNNING,
            enqueued_at=ms_to_datetime(d.enqueued_at), started_at=ms_to_datetime(d.started_at),
            last_attempted_at=ms_to_datetime(int(time.time() * 1000)), finished_at=None,
            args=message.args, kwargs=message.kwargs, backend=self.alias, errors=[], worker_ids=workers,
        )
        start = time.perf_counter()
        _close_connections()
        try:
            task_started.send(sender=sender, task_result=result)
            args = [TaskContext(task_result=result), *message.args] if task.takes_context else message.args
            value = self._call(task, args, message.kwargs, limit, prep.is_async)
            try:
                result_json = dumps(normalize_json(value))
            except (TypeError, ValueError, RecursionError) as exc:
                raise InvalidArguments(f"the return value of {message.task} is not JSON: {exc}") from None
            if len(result_json) > opts.result_max_bytes // 4 and len(result_json.encode("utf-8", "surrogatepass")) > opts.result_max_bytes:
                raise InvalidArguments(
                    f"the return value of {message.task} is {len(result_json.encode('utf-8', 'surrogatepass'))} bytes as JSON; "
                    f"the limit is {opts.result_max_bytes} (RESULT_MAX_BYTES). Store large results elsewhere and return their id."
                )
        except BaseException as exc:  # noqa: BLE001 - a task's failure is data, never a worker crash (KeyboardInterrupt, SystemExit too)
            duration = time.perf_counter() - start
            if isinstance(exc, TaskTimeout) and exc.limit is None and exc.args == TaskTimeout().args and limit > 0:
                exc.limit = limit
                exc.args = (f"{message.task} exceeded its time limit of {limit:g} s (ran {duration:.3g} s)",)
                logger.warning("task %s id=%s exceeded its time limit of %g s", message.task, d.id, limit)
            outcome = self._failure(task, exc, d, max_retries, opts, over)
            outcome.task_name, outcome.duration = message.task, duration
            object.__setattr__(result, "status", TaskResultStatus.READY if outcome.kind == RETRY else TaskResultStatus.FAILED)
            object.__setattr__(result, "finished_at", None if outcome.kind == RETRY else ms_to_datetime(int(time.time() * 1000)))
            result.errors.append(TaskError(exception_class_path=outcome.error["exc"], traceback=outcome.error["tb"]))
            self._finish(sender, result)
            return outcome
        finally:
            _close_connections()
        duration = time.perf_counter() - start
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "finished_at", ms_to_datetime(int(time.time() * 1000)))
        object.__setattr__(result, "_return_value", value)
        self._finish(sender, result)
        return Outcome(SUCCESS, result_json=result_json, task_name=message.task, duration=duration)

    @staticmethod
    def _call(task: Task, args: list[Any], kwargs: dict[str, Any], limit: float, is_async: bool) -> Any:
        """``task.call`` under a time limit of ``limit`` seconds (0: none): ``TaskTimeout`` when it is reached.

        A thread gets the exception asynchronously from the watchdog (timelimit.py); the
        caller's ``except`` handles one raised here between the call and ``disarm``. An
        async task is cancelled by its event loop instead: an asynchronous exception in
        the thread waiting on the loop would only arrive once the coroutine had finished.
        """
        if not 0 < limit < float("inf"):
            return task.call(*args, **kwargs)
        if is_async:
            return async_to_sync(_within)(task.func, limit, args, kwargs)
        handle = arm(threading.get_ident(), limit)
        try:
            return task.call(*args, **kwargs)
        finally:
            disarm(handle)

    def _finish(self, sender: type, result: TaskResult) -> None:
        try:
            task_finished.send(sender=sender, task_result=result)
        except Exception:  # a broken receiver must not change the task's fate
            logger.exception("a task_finished receiver raised")

    def _failure(self, task: Task, exc: BaseException, d: Delivery, max_retries: int, opts: Options,
                 over: dict[str, Any] | None = None) -> Outcome:
        error = error_dict(exc)
        failures = d.failures + 1
        retryable = isinstance(exc, Retry)
        if isinstance(exc, TaskTimeout):
            retryable = not (isinstance(task, RedisTask) and isinstance(exc, task.no_retry_on))
        elif not retryable and isinstance(task, RedisTask):
            retryable = isinstance(exc, task.retry_on) and not isinstance(exc, task.no_retry_on)
        elif not retryable:
            retryable = isinstance(exc, Exception)
        if isinstance(exc, RedisQError) and not isinstance(exc, Retry):
            retryable = False  # e.g. a result that is not JSON: retrying cannot help
        if retryable and failures <= max_retries:
            if isinstance(exc, Retry) and exc.delay is not None:
                delay = int(exc.delay * 1000)
            else:
                over = over or {}
                base = task.backoff_base if isinstance(task, RedisTask) and task.backoff_base is not None else opts.backoff_base
                cap = task.backoff_max if isinstance(task, RedisTask) and task.backoff_max is not None else opts.backoff_max
                base, cap = over.get("backoff_base", base), over.get("backoff_max", cap)
                delay = compute_backoff(failures, base, cap)
            return Outcome(RETRY, error=error, delay_ms=delay, failed=True)
        if isinstance(exc, TaskTimeout):
            reason = "timeout"
        else:
            reason = "failed" if retryable or failures > max_retries else "not_retryable"
        return Outcome(DEAD, error=error, reason=reason, failed=True)


async def _within(func: Any, limit: float, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Await ``func(*args, **kwargs)`` for at most ``limit`` seconds; ``TaskTimeout`` (it is cancelled) past that."""
    try:
        async with asyncio.timeout(limit) as scope:
            return await func(*args, **kwargs)
    except TimeoutError:
        if scope.expired():
            raise TaskTimeout from None
        raise
