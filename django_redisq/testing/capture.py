"""What a block of code enqueued, for assertions, and running it through the real worker.

``with captured_tasks() as captured:`` listens to the Tasks framework's
``task_enqueued`` signal, which every backend sends once a task is stored (ours
after the enqueue script ran), so it records what really went to the queue, from
any thread, ``enqueue``, ``aenqueue``, ``delay`` and ``enqueue_many`` alike, with
the options it was enqueued with (``task.using(...)``). A call an idempotency key
turned into a duplicate stores nothing and sends no signal, so it is not captured.

``delay_on_commit`` (and any ``transaction.on_commit`` that enqueues) inside a
transaction the test never commits (pytest-django's ``db``, ``TestCase``) would
enqueue nothing; at the end of the block the on-commit callbacks registered in it
are run, as Django's ``TestCase.captureOnCommitCallbacks(execute=True)`` does, and
what they enqueue is captured with ``on_commit=True``.

``captured.run()`` runs what was captured through the real worker (``Worker`` in
burst mode, in this process): retries, signals, time limits and dead letters are
the worker's own. It needs a ``RedisQueueBackend`` on a reachable Redis (the
plugin's ``redisq_queue`` fixture, or your own).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from django_redisq.compat import Task, TaskResult, normalize_json, task_enqueued
from django_redisq.ops.inspector import Inspector
from django_redisq.worker.worker import Worker

logger = logging.getLogger("django_redisq")

RUN_TIMEOUT = 30.0
"""Seconds ``run()`` and ``Drain.drain()`` wait for the tasks to finish by default."""


@dataclass(frozen=True)
class CapturedTask:
    """One task a block enqueued: the task as enqueued (``using(...)`` applied), its arguments and its result."""

    task: Task[Any, Any]
    args: list[Any]
    kwargs: dict[str, Any]
    result: TaskResult[Any, Any]
    on_commit: bool = False  # enqueued by an on-commit callback the block registered

    @property
    def id(self) -> str:
        return self.result.id

    @property
    def name(self) -> str:
        """The task's dotted path (``shop.tasks.send_receipt``)."""
        return self.task.module_path

    @property
    def options(self) -> dict[str, Any]:
        """What the call was enqueued with: queue, priority, run_after, backend, and our options that are set."""
        found = {"queue_name": self.task.queue_name, "priority": self.task.priority, "run_after": self.task.run_after,
                 "backend": self.task.backend}
        for name in ("max_retries", "backoff_base", "backoff_max", "timeout", "idempotency_key"):
            value = getattr(self.task, name, None)
            if value is not None:
                found[name] = value
        return found

    def describe(self) -> str:
        call = ", ".join([*(repr(a) for a in self.args), *(f"{k}={v!r}" for k, v in self.kwargs.items())])
        return f"{self.name}({call}) on {self.task.queue_name!r}{' (on commit)' if self.on_commit else ''}"


def _path(task: Task[Any, Any] | str) -> str:
    return task if isinstance(task, str) else task.module_path


@dataclass
class Captured:
    """The tasks a ``captured_tasks()`` block enqueued, in order."""

    tasks: list[CapturedTask] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[CapturedTask]:
        return iter(list(self.tasks))

    def __getitem__(self, index: int) -> CapturedTask:
        return self.tasks[index]

    def clear(self) -> None:
        self.tasks.clear()

    def filter(self, task: Task[Any, Any] | str | None = None, *, args: Sequence[Any] | None = None, kwargs: dict[str, Any] | None = None,
               on_commit: bool | None = None, **options: Any) -> list[CapturedTask]:
        """The captured tasks that match: ``task`` (the task or its dotted path), the exact ``args`` / ``kwargs``
        (compared as they arrive, JSON-normalized: a tuple equals a list), ``on_commit``, and any of ``options``
        (``queue_name="emails"``, ``priority=5``, ``max_retries=0``)."""
        want_args = normalize_json(list(args)) if args is not None else None
        want_kwargs = normalize_json(dict(kwargs)) if kwargs is not None else None
        unknown = set(options) - {"queue_name", "priority", "run_after", "backend", "max_retries", "backoff_base", "backoff_max",
                                  "timeout", "idempotency_key"}
        if unknown:
            raise TypeError(f"unknown option(s) to match: {', '.join(sorted(unknown))}")
        found = []
        for c in self.tasks:
            if task is not None and c.name != _path(task):
                continue
            if want_args is not None and c.args != want_args:
                continue
            if want_kwargs is not None and c.kwargs != want_kwargs:
                continue
            if on_commit is not None and c.on_commit != on_commit:
                continue
            have = c.options
            if any(have.get(k) != v for k, v in options.items()):
                continue
            found.append(c)
        return found

    def assert_enqueued(self, task: Task[Any, Any] | str | None = None, *, args: Sequence[Any] | None = None,
                        kwargs: dict[str, Any] | None = None, on_commit: bool | None = None, count: int | None = None,
                        **options: Any) -> CapturedTask:
        """The one captured task that matches (see ``filter``); ``AssertionError`` listing what was captured otherwise.

        ``count``: exactly this many must match (the first is returned); without it, exactly one.
        """
        found = self.filter(task, args=args, kwargs=kwargs, on_commit=on_commit, **options)
        want = 1 if count is None else count
        if len(found) != want or not found:
            asked = ", ".join(f"{k}={v!r}" for k, v in
                              {"args": args, "kwargs": kwargs, "on_commit": on_commit, **options}.items() if v is not None)
            what = f"{_path(task) if task is not None else 'any task'}{f' with {asked}' if asked else ''}"
            raise AssertionError(f"expected {want} enqueued {what}, found {len(found)}; captured: {self._listing()}")
        return found[0]

    def assert_not_enqueued(self, task: Task[Any, Any] | str | None = None, **match: Any) -> None:
        """``AssertionError`` if a captured task matches (see ``filter``); with no arguments, if anything was enqueued."""
        found = self.filter(task, **match)
        if found:
            raise AssertionError(f"expected no enqueued {_path(task) if task is not None else 'task'}, found "
                                 f"{', '.join(c.describe() for c in found)}")

    def _listing(self) -> str:
        return "; ".join(c.describe() for c in self.tasks) or "nothing"

    def run(self, timeout: float = RUN_TIMEOUT) -> list[TaskResult[Any, Any]]:
        """Run the captured tasks through the real worker until each is finished; their results, refreshed.

        Burst workers of each backend serve the captured tasks' queues in this
        process (what else waits there runs too, as a worker would run it), again
        while a retry is scheduled, until every captured task succeeded or failed
        for good (a dead letter) or ``timeout`` seconds passed (``AssertionError``
        naming the unfinished). Tasks the captured ones enqueue are captured too
        while the block is open.
        """
        items = list(self.tasks)
        queues: dict[str, set[str]] = {}
        for c in items:
            queues.setdefault(c.task.backend, set()).add(c.task.queue_name)
        run_until(lambda: all(_finished(c) for c in items), queues,
                  lambda: ", ".join(c.describe() for c in items if not _finished(c)), timeout)
        return [c.task.get_backend().get_result(c.id) for c in items]


class Recorder:
    """The ``task_enqueued`` receiver of one block: each task enqueued goes into ``captured``, marked ``on_commit``
    while the block's on-commit callbacks run."""

    def __init__(self, captured: Captured) -> None:
        self.captured = captured
        self.on_commit = False

    def receive(self, sender: Any, task_result: TaskResult[Any, Any], **kwargs: Any) -> None:
        self.captured.tasks.append(CapturedTask(task_result.task, list(task_result.args), dict(task_result.kwargs), task_result,
                                                on_commit=self.on_commit))


def _finished(c: CapturedTask) -> bool:
    return c.task.get_backend().get_result(c.id).is_finished


def run_until(done: Callable[[], bool], queues: dict[str, set[str]], unfinished: Callable[[], str] | None = None,
              timeout: float = RUN_TIMEOUT) -> None:
    """Burst workers of each backend alias on its ``queues``, in this process, until ``done()``; ``AssertionError`` after
    ``timeout`` seconds, saying what ``unfinished()`` names.

    A burst worker leaves once nothing is pending, so a retry scheduled for later
    needs another one once it is due: they are started until ``done()``.
    """
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not finished within {timeout:g} s: {unfinished() if unfinished is not None else 'the tasks'}")
        for alias, names in queues.items():
            Worker(sorted(names), backend=alias, burst=True).run()
        time.sleep(0.01)


class Drain:
    """The queues of one backend, drained by burst workers in this process (the plugin's ``redisq_queue``)."""

    def __init__(self, alias: str = "default", timeout: float = RUN_TIMEOUT) -> None:
        self.alias, self.timeout = alias, timeout

    def _left(self, names: Sequence[str]) -> list[str]:
        return [f"{s.queue}: {s.pending} pending, {s.scheduled} scheduled, {s.running + s.held} running"
                for s in Inspector.for_alias(self.alias).stats()
                if s.queue in names and (s.pending or s.scheduled or s.running or s.held)]

    def drain(self, *queues: str, timeout: float | None = None) -> None:
        """Run burst workers until nothing is pending, scheduled or running in the backend's queues (or ``queues``).

        A task scheduled for later (``run_after``, a retry's backoff) keeps it
        waiting: keep backoffs short in test settings (``BACKOFF_BASE``).
        """
        names = list(queues or Inspector.for_alias(self.alias).queues)
        run_until(lambda: not self._left(names), {self.alias: set(names)}, lambda: "; ".join(self._left(names)),
                  self.timeout if timeout is None else timeout)

    def run_until(self, done: Callable[[], bool], *queues: str, timeout: float | None = None) -> None:
        """Run burst workers on the backend's queues (or ``queues``) until ``done()``."""
        names = set(queues or Inspector.for_alias(self.alias).queues)
        run_until(done, {self.alias: names}, None, self.timeout if timeout is None else timeout)


@contextmanager
def captured_tasks(*, on_commit: bool = True) -> Iterator[Captured]:
    """Record what the block enqueued (``Captured``); with ``on_commit``, run the on-commit callbacks it registered at its end.

    Nothing is faked: the tasks are stored in their queues as usual, so
    ``captured.run()`` (or a worker) runs them afterwards.
    """
    captured = Captured()
    recorder = Recorder(captured)
    task_enqueued.connect(recorder.receive, weak=False, dispatch_uid=("django_redisq.captured", id(captured)))
    starts = {alias: len(connections[alias].run_on_commit) for alias in connections}
    try:
        yield captured
        if on_commit:
            recorder.on_commit = True
            for alias, start in starts.items():
                _run_on_commit(alias, start)
    finally:
        recorder.on_commit = False
        task_enqueued.disconnect(dispatch_uid=("django_redisq.captured", id(captured)))


def _run_on_commit(alias: str, start: int) -> None:
    """The on-commit callbacks registered on ``alias`` since ``start``, run once each (and those they register), as
    ``TestCase.captureOnCommitCallbacks(execute=True)`` runs them."""
    conn = connections[alias]
    while True:
        count = len(conn.run_on_commit)
        pending: list[Any] = list(conn.run_on_commit[start:])  # (savepoint ids, callback, robust)
        for _, callback, robust in pending:
            if robust:
                try:
                    callback()
                except Exception:
                    logger.exception("an on-commit callback raised (robust=True: going on)")
            else:
                callback()
        if count == len(conn.run_on_commit):
            return
        start = count
