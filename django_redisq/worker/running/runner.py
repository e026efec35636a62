"""Run one delivered task: decode it, call it under its time limit, and say what became of it.

The worker's pools all run tasks through a ``Runner``: ``run`` on the calling
thread (the thread pool, and each child of the process pool), ``arun`` on an
event loop (the asyncio pool). ``begin`` does what every path shares (decode,
check the arguments, work out the policy), so the paths differ only in how
they call the task. A call can be interrupted from another thread with
``interrupt`` (cancellation): an asynchronous exception in a thread, a
cancelled coroutine on a loop. ``lost`` is the outcome of an attempt whose
process died under it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from functools import partial
from typing import Any, Protocol

from asgiref.sync import async_to_sync, sync_to_async
from django.db import close_old_connections

from django_redisq import progress
from django_redisq.compat import (
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_finished,
    task_started,
    timeout,
    uncancel,
)
from django_redisq.core import tracing
from django_redisq.core.clock import ms_to_datetime
from django_redisq.core.fit import Fit
from django_redisq.core.message import Message, decode
from django_redisq.core.metadata import attach, stored
from django_redisq.core.options import Options
from django_redisq.core.partitions import logical
from django_redisq.durable.context import attach_journal
from django_redisq.events import lifecycle
from django_redisq.exceptions import BadMessage, Suspended, TaskCancelled, TaskTimeout, UnknownSchema
from django_redisq.store.broker import Broker
from django_redisq.store.steps.replies import Delivery
from django_redisq.task import RedisTask, get_registered
from django_redisq.worker.running.attempt import Attempt, Prepared
from django_redisq.worker.running.outcome import DEAD, RETRY, Outcome, error_dict, failure, suspension
from django_redisq.worker.running.progress import ProgressWriter
from django_redisq.worker.running.reporting import ErrorReporter
from django_redisq.worker.running.timelimit import Handle, arm, disarm, interrupt

logger = logging.getLogger("django_redisq")

CRASH_ALLOWANCE = 10
"""Deliveries beyond max_retries + 1 (each a worker dying mid-task) before a task is dead-lettered."""


def _close_connections() -> None:
    """Close database connections past their lifetime; a broken database must not end the worker."""
    try:
        close_old_connections()
    except Exception:
        logger.exception("closing old database connections failed")


def _limit(message: Message, prep: Prepared, opts: Options) -> float:
    """Seconds an attempt may run (0: no limit): the call's, else the task's, else the queue's or OPTIONS'."""
    limit = message.overrides.get("timeout", opts.timeout if prep.timeout is None else prep.timeout)
    return float(limit) if 0 < limit < float("inf") else 0.0


def _now() -> Any:
    return ms_to_datetime(int(time.time() * 1000))


class ConsumerSpan(Protocol):
    """An attempt's consumer span as the runner uses it: ``tracing.Processing``, or a no-op when tracing is off."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...

    @property
    def traceparent(self) -> str: ...

    def end(self, outcome: str, exc: BaseException | None = None) -> None: ...


class Runner:
    """Runs tasks of one backend alias; safe to share between threads."""

    def __init__(self, options: Options, backend_alias: str) -> None:
        self.options = options
        self.alias = backend_alias
        self._tasks: dict[tuple[str, str], Prepared] = {}
        self._threads: dict[str, Handle] = {}  # task id -> the armed handle of the thread running it
        self._coros: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = {}  # task id -> its coroutine
        self._cancelled: dict[str, str] = {}  # task id -> who cancelled it (while it unwinds)
        self._broker: Broker | None = None  # progress reports' (built on the first, in the process that runs tasks)
        self.reporter = ErrorReporter(options.error_reporting)  # a failed attempt's exception, to logging and Sentry

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
            sender = type(task.get_backend())
            found = self._tasks[key] = Prepared(
                task, Fit.of(task.func), sender,
                task.max_retries if mine else None, task.timeout if mine else None,  # type: ignore[attr-defined]
                inspect.iscoroutinefunction(task.func),
                getattr(sender, "result_class", TaskResult), getattr(sender, "context_class", TaskContext),
            )
        return found

    def begin(self, d: Delivery, worker_id: str) -> Attempt | Outcome:
        """The attempt to call, or the outcome already decided (a message that cannot run)."""
        opts = self.options.for_queue(d.queue)
        try:
            message = decode(d.raw, d.task, logical(d.queue))  # a partition's tasks are its logical queue's
            prep = self._prepared(message)
            call_args = [None, *message.args] if prep.task.takes_context else message.args
            try:
                prep.fit.check(call_args, message.kwargs)
            except TypeError as exc:
                raise BadMessage("bad_arguments", f"arguments do not fit {message.task}{prep.fit.signature}: {exc}") from None
        except UnknownSchema as exc:
            return Outcome(DEAD, error=error_dict(None, str(exc), "django_redisq.exceptions.UnknownSchema"), reason="unknown_schema")
        except BadMessage as exc:
            return Outcome(DEAD, error=error_dict(None, exc.detail, "django_redisq.exceptions.BadMessage"), reason=exc.reason)
        except Exception as exc:  # noqa: BLE001 - a task that cannot even be built (settings drift)
            return Outcome(DEAD, error=error_dict(exc), reason="bad_message")

        over = message.overrides  # from task.using(...) at enqueue; they win over the registered task's
        max_retries = over.get("max_retries", opts.max_retries if prep.max_retries is None else prep.max_retries)
        if d.deliveries > max_retries + 1 + CRASH_ALLOWANCE:
            return Outcome(
                DEAD, reason="too_many_deliveries", task_name=message.task,
                error=error_dict(None, f"delivered {d.deliveries} times without finishing (does it kill its worker?)",
                                 "django_redisq.exceptions.TooManyDeliveries"),
            )
        result: TaskResult = prep.result_class(
            task=prep.task, id=d.id, status=TaskResultStatus.RUNNING,
            enqueued_at=ms_to_datetime(d.enqueued_at), started_at=ms_to_datetime(d.started_at),
            # the first attempt's start is its last attempt's, as Django's backends record it
            last_attempted_at=ms_to_datetime(d.started_at) if d.deliveries <= 1 else _now(), finished_at=None, args=message.args, kwargs=message.kwargs,
            backend=self.alias, errors=[], worker_ids=d.workers.split(",") if d.workers else [worker_id],
        )
        attach(result, stored(d.metadata, message.metadata))  # where Django has metadata: the last saved, else the enqueued
        context = prep.context_class(task_result=result) if prep.task.takes_context else None
        self._broker = self._broker or Broker(self.options)  # built where tasks run (progress, durable steps)
        attach_journal(context, self._broker, d.queue, d.id, opts.result_max_bytes)  # durable steps, sleeps, waits
        args = [context, *message.args] if context is not None else message.args
        return Attempt(d, message, prep, result, args, _limit(message, prep, opts), max_retries, opts, context=context,
                       worker_id=worker_id)

    def limit_for(self, d: Delivery) -> float:
        """The time limit ``begin`` will give ``d``, in seconds (0: none, or a message that cannot run)."""
        try:
            message = decode(d.raw, d.task, logical(d.queue))  # a partition's tasks are its logical queue's
            return _limit(message, self._prepared(message), self.options.for_queue(d.queue))
        except Exception:  # noqa: BLE001 - it will not run: begin says why
            return 0.0

    # -- on a thread -----------------------------------------------------

    def run(self, d: Delivery, worker_id: str) -> Outcome:
        """Run ``d`` on this thread."""
        a = self.begin(d, worker_id)
        if isinstance(a, Outcome):
            return a
        return self._execute(a)

    def _execute(self, a: Attempt) -> Outcome:
        start = time.perf_counter()
        _close_connections()
        span = self._span(a)  # core/tracing.py: a consumer span, or NOOP when no tracer provider is configured
        try:
            task_started.send(sender=a.prep.sender, task_result=a.result)
            try:
                with self._progress(a), span:  # report_progress() in the task writes through it (worker/running/progress.py)
                    value = self._call(a)
            finally:
                a.keep_metadata()
            result_json = a.result_json(value)
        except BaseException as exc:  # noqa: BLE001 - a task's failure is data, never a worker crash (KeyboardInterrupt, SystemExit too)
            outcome = self._failed(a, exc, time.perf_counter() - start)
            span.end(outcome.kind, exc)
            outcome.trace_from = span.traceparent
            self._finish(a)
            return outcome
        finally:
            self._cancelled.pop(a.d.id, None)
            _close_connections()
        outcome = self._succeeded(a, value, result_json, time.perf_counter() - start)
        span.end(outcome.kind)
        outcome.trace_from = span.traceparent  # "" when off (worker/settling/flows.py: a released step links to it)
        self._finish(a)
        return outcome

    def _call(self, a: Attempt) -> Any:
        """``task.call`` under the attempt's time limit, interruptible by ``interrupt``.

        A thread gets ``TaskTimeout`` (or ``TaskCancelled``) asynchronously from
        the watchdog (worker/running/timelimit.py); the caller's ``except`` handles one raised
        between the call and ``disarm``. An async task runs on an event loop and
        is cancelled there instead: an asynchronous exception in the thread
        waiting on the loop would only arrive once the coroutine had finished.
        """
        task, d = a.prep.task, a.d
        if a.prep.is_async:
            return async_to_sync(self._within)(a)
        handle = arm(threading.get_ident(), a.limit or float("inf"))
        self._threads[d.id] = handle
        try:
            return task.call(*a.args, **a.message.kwargs)
        finally:
            self._threads.pop(d.id, None)
            disarm(handle)

    # -- on an event loop ------------------------------------------------

    async def arun(self, d: Delivery, worker_id: str, sync_executor: Executor) -> Outcome:
        """Run ``d`` on the running event loop; a sync task runs on ``sync_executor``'s threads."""
        a = self.begin(d, worker_id)
        if isinstance(a, Outcome):
            return a
        if not a.prep.is_async:
            return await asyncio.get_running_loop().run_in_executor(sync_executor, self._execute, a)
        start = time.perf_counter()
        await sync_to_async(_close_connections)()
        span = self._span(a)
        try:
            await task_started.asend(sender=a.prep.sender, task_result=a.result)
            try:
                with self._progress(a), span:
                    value = await self._within(a)
            finally:
                a.keep_metadata()
            result_json = a.result_json(value)
        except BaseException as exc:  # noqa: BLE001 - as in _execute
            outcome = self._failed(a, exc, time.perf_counter() - start)
            span.end(outcome.kind, exc)
            outcome.trace_from = span.traceparent
            await self._afinish(a)
            return outcome
        finally:
            self._cancelled.pop(a.d.id, None)
            await sync_to_async(_close_connections)()
        outcome = self._succeeded(a, value, result_json, time.perf_counter() - start)
        span.end(outcome.kind)
        outcome.trace_from = span.traceparent
        await self._afinish(a)
        return outcome

    async def _within(self, a: Attempt) -> Any:
        """Await the task for at most its limit (``TaskTimeout`` past it); ``TaskCancelled`` if ``interrupt``ed."""
        me = asyncio.current_task()
        assert me is not None
        self._coros[a.d.id] = (asyncio.get_running_loop(), me)
        try:
            if not a.limit:
                return await a.prep.task.func(*a.args, **a.message.kwargs)
            async with timeout(a.limit) as scope:
                return await a.prep.task.func(*a.args, **a.message.kwargs)
        except TimeoutError:
            if a.limit and scope.expired():
                raise TaskTimeout from None
            raise
        except asyncio.CancelledError:
            if a.d.id in self._cancelled:
                uncancel(me)
                raise TaskCancelled from None
            raise
        finally:
            self._coros.pop(a.d.id, None)

    @staticmethod
    def _span(a: Attempt) -> ConsumerSpan:
        """The attempt's consumer span, continuing the trace its message carries (core/tracing.py)."""
        return tracing.process(a.message.task, a.message.queue, a.d.id, a.d.deliveries, a.message.metadata)

    @contextmanager
    def _progress(self, a: Attempt) -> Iterator[None]:
        """``report_progress`` of the attempt's task goes to a writer of its own, flushed when the call ends."""
        self._broker = self._broker or Broker(self.options)
        writer = ProgressWriter(partial(self._save_progress, self._broker, a), a.d.deliveries)
        token = progress.current.set(writer)
        try:
            yield
        finally:
            progress.current.reset(token)
            writer.flush()

    def _save_progress(self, broker: Broker, a: Attempt, report_json: str) -> bool:
        """Store one report; a stored one is also a lifecycle event where LIFECYCLE_EVENTS is on (events/lifecycle.py)."""
        saved = broker.progress.save(a.d.queue, a.d.id, a.worker_id, report_json)
        if saved and self.options.lifecycle_events:
            lifecycle.progress(self.alias, a.d.id, a.message.task, a.message.queue, report_json)
        return saved

    # -- interrupting ----------------------------------------------------

    def interrupt(self, task_id: str, why: str = "") -> bool:
        """Cancel task ``task_id`` if it runs here: True if it was told (it ends with ``TaskCancelled``).

        ``why`` (who cancelled it) goes into the error's message.
        """
        coro = self._coros.get(task_id)
        if coro is not None:
            loop, t = coro
            self._cancelled[task_id] = why
            loop.call_soon_threadsafe(t.cancel)
            return True
        handle = self._threads.get(task_id)
        if handle is None:
            return False
        self._cancelled[task_id] = why
        if interrupt(handle, TaskCancelled):
            return True
        self._cancelled.pop(task_id, None)
        return False

    def running(self) -> set[str]:
        return set(self._threads) | set(self._coros)

    # -- outcomes --------------------------------------------------------

    def _succeeded(self, a: Attempt, value: Any, result_json: str, duration: float) -> Outcome:
        object.__setattr__(a.result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(a.result, "finished_at", _now())
        object.__setattr__(a.result, "_return_value", normalize_json(value))  # what get_result will return, as Django stores it
        return Outcome("success", result_json=result_json, task_name=a.message.task, duration=duration, metadata=a.metadata)

    def _failed(self, a: Attempt, exc: BaseException, duration: float) -> Outcome:
        if isinstance(exc, Suspended):  # a durable sleep or wait: the attempt ends, not failed (suspend.lua)
            return suspension(exc, a.result, a.message.task, duration, a.metadata)
        if isinstance(exc, TaskTimeout) and exc.limit is None and exc.args == TaskTimeout().args and a.limit:
            exc.limit = a.limit
            exc.args = (f"{a.message.task} exceeded its time limit of {a.limit:g} s (ran {duration:.3g} s)",)
            logger.warning("task %s id=%s exceeded its time limit of %g s", a.message.task, a.d.id, a.limit)
        if isinstance(exc, TaskCancelled) and exc.args == TaskCancelled().args and a.d.id in self._cancelled:
            who = self._cancelled[a.d.id]
            exc.args = (f"{a.message.task} was cancelled{' by ' + who if who else ''} while running (ran {duration:.3g} s)",)
        # the result as this attempt leaves it (its error appended, FAILED), which a task's backoff function is given
        error = error_dict(exc, user_code=True)
        a.result.errors.append(TaskError(exception_class_path=error["exc"], traceback=error["tb"]))
        object.__setattr__(a.result, "status", TaskResultStatus.FAILED)
        object.__setattr__(a.result, "finished_at", _now())
        outcome = failure(a.prep.task, exc, a.d, a.max_retries, a.opts, a.message.overrides, retry=not a.final,
                          result=a.result, error=error)
        outcome.task_name, outcome.duration, outcome.metadata = a.message.task, duration, a.metadata
        if outcome.error is not error:  # the backoff function failed: that is the error recorded
            a.result.errors[-1] = TaskError(exception_class_path=outcome.error["exc"], traceback=outcome.error["tb"])
        if outcome.kind == RETRY:
            object.__setattr__(a.result, "status", TaskResultStatus.READY)
            object.__setattr__(a.result, "finished_at", None)
        self.reporter.report(exc, a.message.task, a.d.id, a.message.queue, a.d.deliveries, outcome.kind)  # worker/running/reporting.py
        return outcome

    def lost(self, d: Delivery, worker_id: str, exc: BaseException, duration: float = 0.0) -> Outcome:
        """The outcome of an attempt that could not finish where it ran (its process died or was killed)."""
        a = self.begin(d, worker_id)
        if isinstance(a, Outcome):
            return a
        outcome = self._failed(a, exc, duration)
        self._finish(a)
        return outcome

    def _finish(self, a: Attempt) -> None:
        try:
            task_finished.send(sender=a.prep.sender, task_result=a.result)
        except Exception:  # a broken receiver must not change the task's fate
            logger.exception("a task_finished receiver raised")

    async def _afinish(self, a: Attempt) -> None:
        try:
            await task_finished.asend(sender=a.prep.sender, task_result=a.result)
        except Exception:
            logger.exception("a task_finished receiver raised")
