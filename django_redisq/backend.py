"""``RedisQueueBackend``: the Django Tasks backend (enqueue, get_result, checks)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import secrets
from collections.abc import Iterable, Sequence
from functools import cached_property
from importlib import import_module
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from django_redisq.compat import (
    DEFAULT_TASK_BACKEND_ALIAS,
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
)
from django_redisq.core import partitions, tracing
from django_redisq.core.clock import ms_to_datetime
from django_redisq.core.limits import task_limits
from django_redisq.core.message import OVERRIDES, encode_arguments
from django_redisq.core.message import encode as encode_message
from django_redisq.core.metadata import attach, stored
from django_redisq.core.metadata import encode as encode_metadata
from django_redisq.core.options import Options
from django_redisq.core.states import STATE_TO_STATUS
from django_redisq.exceptions import InvalidArguments, TaskNotFound
from django_redisq.progress import Progress
from django_redisq.progress import decode as decode_progress
from django_redisq.settings import discovery
from django_redisq.settings.read import TOP_LEVEL, build_options, check_errors
from django_redisq.store.broker import Broker
from django_redisq.store.reads.priority import stored_priority
from django_redisq.store.steps.replies import Enqueued, NewTask
from django_redisq.task import RedisTask, get_registered, plain_signature

if TYPE_CHECKING:  # the async steps load on first use: a worker (threads) or a sync caller never needs them
    from django_redisq.store.broker.async_broker import AsyncBroker



NOT_INSTALLED = ("{where} uses django_redisq's RedisQueueBackend, but django_redisq is not in INSTALLED_APPS: "
                 "no worker could run its tasks (`manage.py runworker` is an unknown command).")
"""Check E082, and what an enqueue raises then."""

ID_START = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
VALIDATED_MAX = 512
"""Task objects a backend remembers as validated (``_validated``)."""


def _arity(sig: inspect.Signature) -> tuple[inspect.Signature, int, int]:
    """``sig`` and how many positional arguments alone bind to it (least, most); (sig, 1, 0) when no count says it."""
    plain = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = list(sig.parameters.values())
    if not all(p.kind in plain for p in params):
        return sig, 1, 0  # *args, **kwargs or keyword-only parameters: bind() decides
    return sig, sum(p.default is p.empty for p in params), len(params)


class RedisQueueBackend(BaseTaskBackend):
    """Tasks stored in Redis and run by ``manage.py runworker``.

    Built per thread at import time by Django: ``__init__`` does no I/O;
    options and the connection are resolved on first use.
    """

    task_class = RedisTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True  # higher first, FIFO within a priority (store/scripts/lib/ready.lua)
    supports_metadata = True  # Task.metadata and save_metadata(), where the running Django has them
    result_class: type[TaskResult] = TaskResult
    """The results this backend and its workers build (a subclass may give others; the tests' stand-ins do)."""
    context_class: type[TaskContext] = TaskContext
    """The ``TaskContext`` a worker gives a task that takes one."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.params = params
        self._valid: dict[int, Task] = {}  # id -> the task objects validate_task passed (Tasks are immutable)
        self._enqueueing: set[int] = set()  # ids of tasks validate_task checks for an enqueue (none lenient)
        self._signatures: dict[Any, tuple[inspect.Signature, int, int]] = {}  # task function -> _arity(its signature)
        if isinstance(params.get("OPTIONS"), dict) and params["OPTIONS"].get("LIFECYCLE_EVENTS") is True:
            from django_redisq.events import lifecycle  # task transitions published as events (off by default)

            lifecycle.connect()

    def _validated(self, task: Task) -> None:
        """``validate_task`` once per task object: ``.delay()`` on a module-level task pays for it once, not per call.

        A task object is frozen, and what the check reads of this backend is fixed at
        its creation. The entry holds the object, so its id cannot be reused while it is
        listed; a program that makes a new ``task.using(...)`` per call is checked per
        call, and the list is emptied when it reaches ``VALIDATED_MAX``.
        """
        if self._valid.get(id(task)) is not task:
            if not apps.is_installed("django_redisq"):  # check E082, which runs only if django.tasks was imported before it
                raise ImproperlyConfigured(NOT_INSTALLED.format(where=f"TASKS[{self.alias!r}]") + ' Add "django_redisq" to INSTALLED_APPS.')
            self.conf  # noqa: B018 - ImproperlyConfigured, with every problem, before the task's own checks
            self._enqueueing.add(id(task))
            try:
                self.validate_task(task)
            finally:
                self._enqueueing.discard(id(task))
            self._findable(task)
            if len(self._valid) >= VALIDATED_MAX:
                self._valid.clear()
            self._valid[id(task)] = task

    @cached_property
    def reach(self) -> discovery.Reach:
        """The modules a worker of this backend imports (the apps' ``tasks`` and ``IMPORTS``), found once."""
        return discovery.Reach(discovery.imports_of(self.params))

    def _findable(self, task: Task) -> None:
        """``InvalidTask`` for a task whose module no worker imports: it would be dead-lettered as unknown_task."""
        module = getattr(task.func, "__module__", None) or ""
        if not self.reach.covers(module):
            raise InvalidTask(self.reach.refusal(task.module_path, module, self.alias))

    def _bind(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """``InvalidArguments`` (a ``TypeError``) for a call that can never run: the arguments do not fit the function."""
        found = self._signatures.get(task.func)
        if found is None:
            if len(self._signatures) >= VALIDATED_MAX:
                self._signatures.clear()
            found = self._signatures[task.func] = _arity(inspect.signature(task.func))
        sig, least, most = found
        if not kwargs and least <= len(args) + task.takes_context <= most:
            return  # positional arguments only, to a function of plain parameters: their count says it all
        try:
            if task.takes_context:
                sig.bind(None, *args, **kwargs)
            else:
                sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise InvalidArguments(f"{task.module_path}{plain_signature(sig)} cannot be called with these arguments: {exc}.") from None

    @cached_property
    def conf(self) -> Options:
        return build_options(self.alias, self.params)

    @cached_property
    def broker(self) -> Broker:
        return Broker(self.conf)

    @cached_property
    def abroker(self) -> AsyncBroker:
        """The broker of ``aenqueue`` / ``aget_result``: the same steps on the running loop's own pool."""
        from django_redisq.store.broker.async_broker import AsyncBroker

        return AsyncBroker(self.broker)

    def check(self, **kwargs: Any) -> list[Any]:
        from django.core.checks import Error

        from django_redisq.events import subscriptions
        from django_redisq.schedules import registry as schedules

        where = f"TASKS[{self.alias!r}]"
        errors = check_errors(self.alias, self.params, obj=where) + schedules.check_errors(self.alias, self.params, obj=where)
        errors += subscriptions.check_errors(self.alias, self.params, obj=where)  # events (E100-E107)
        if not apps.is_installed("django_redisq"):
            errors.append(Error(NOT_INSTALLED.format(where=where), hint='Add "django_redisq" to INSTALLED_APPS.',
                                obj=where, id="django_redisq." + "E082"))
        for module in discovery.imports_of(self.params):
            try:
                import_module(module)
            except Exception as exc:  # noqa: BLE001 - a check reports, never raises
                errors.append(Error(
                    f"{where}['OPTIONS']['IMPORTS'] names {module!r}, which cannot be imported: {type(exc).__name__}: {exc}",
                    hint="Give the dotted path of a module on the worker's Python path (e.g. \"shop.jobs\"), or remove it.",
                    obj=where, id="django_redisq." + "E083"))
        return errors

    def validate_task(self, task: Task) -> None:
        """Django's checks of a task; at its definition, none that a misspelled key of ``TASKS[alias]`` caused.

        With ``QUEUE`` written for ``QUEUES``, ``@task(queue_name="emails")`` would raise
        ``InvalidTask`` while its module is imported (a URL import during ``check``: a
        traceback). Then the check reports the key (E080), and an enqueue raises it.
        """
        try:
            super().validate_task(task)
        except InvalidTask:
            if set(self.params) - set(TOP_LEVEL) and id(task) not in self._enqueueing:
                return
            raise

    # -- enqueue ---------------------------------------------------------

    def _prepare(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any],
                 trace: dict[str, str] | None = None) -> tuple[TaskResult, NewTask]:
        self._bind(task, args, kwargs)
        args, kwargs, _ = encode_arguments(args, kwargs, self.conf.max_message_bytes)
        task_id = secrets.token_urlsafe(24)  # 32 characters, 192 random bits
        if task_id[0] == "-":  # an id a shell command line would take for an option (redisq dead show -x...)
            task_id = secrets.choice(ID_START) + task_id[1:]
        delay_ms = 0
        if task.run_after is not None:
            # a relative delay: the due time itself is computed from Redis TIME
            delay_ms = max(0, int((task.run_after - timezone.now()).total_seconds() * 1000))
        idem = task.key_for(args, kwargs) if isinstance(task, RedisTask) else ""
        metadata = getattr(task, "metadata", None)  # Django's metadata proposal: a field of newer Tasks
        metadata = tracing.with_trace(metadata, trace)  # the producer span's context, for the worker's spans (core/tracing.py)
        if metadata:
            try:
                metadata = encode_metadata(metadata, self.conf.for_queue(task.queue_name).metadata_max_bytes)[0]
            except (TypeError, ValueError) as exc:
                raise InvalidArguments(f"the task's {exc}") from None
        msg = encode_message(args, kwargs, self._overrides(task), metadata or None)
        if metadata and len(msg) > self.conf.max_message_bytes:
            raise InvalidArguments(f"the task's arguments and metadata are over {self.conf.max_message_bytes} bytes (MAX_MESSAGE_BYTES).")
        result: TaskResult = self.result_class(
            task=task, id=task_id, status=TaskResultStatus.READY, enqueued_at=None,
            started_at=None, last_attempted_at=None, finished_at=None,
            args=args, kwargs=kwargs, backend=self.alias, errors=[], worker_ids=[],
        )
        attach(result, metadata or {})
        return result, NewTask(task_id, msg, task.module_path, delay_ms, idem, int(task.priority), task_limits(task))

    @staticmethod
    def _overrides(task: Task) -> dict[str, Any]:
        """What ``task.using(...)`` changed from the registered task: it travels with the call."""
        if not isinstance(task, RedisTask):
            return {}
        registered = get_registered(task.module_path)
        if registered is None or registered is task:
            return {}
        for name in ("retry_on", "no_retry_on", "backoff"):
            if getattr(task, name) != getattr(registered, name):
                raise InvalidTask(f"{name} cannot be changed per call with using(): a worker never imports classes or functions "
                                  f"named in Redis. Set it in @task, or raise Retry(delay=...) / an exception it names.")
        return {name: getattr(task, name) for name in OVERRIDES
                if getattr(task, name) is not None and getattr(task, name) != getattr(registered, name)}

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        return self.enqueue_many(task, [(args, kwargs)])[0]

    def enqueue_many(self, task: Task, arg_sets: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[TaskResult]:
        """Enqueue several calls of one task in a single round trip."""
        with tracing.send(task.module_path, task.queue_name) as span:  # NOOP unless a tracer provider is configured
            return self._enqueue_many(task, arg_sets, span)

    def _enqueue_many(self, task: Task, arg_sets: Iterable[tuple[Sequence[Any], dict[str, Any]]],
                      span: tracing.Sending | tracing._Noop) -> list[TaskResult]:
        self._validated(task)
        if getattr(task, "depends_on", ()):  # runs once those tasks succeeded: a small workflow (workflows/enqueue.py)
            from django_redisq.workflows.enqueue import enqueue_dependent

            dependents = [enqueue_dependent(self, task, list(a), dict(k), span.carrier) for a, k in arg_sets]
            if dependents:
                span.identify([r.id for r in dependents])  # the steps' ids; their spec carries span.carrier (core/tracing.py)
            return dependents
        prepared = [self._prepare(task, a, k, span.carrier) for a, k in arg_sets]
        if not prepared:
            return []
        items = [item for _, item in prepared]
        span.identify([item[0] for item in items])
        if self.conf.partitions(task.queue_name) == 1:  # today's path: one script call
            stored = self.broker.enqueue(task.queue_name, items)
        else:  # one script call per partition the items went to
            stored = self._merged(len(items), [(idx, self.broker.enqueue(q, [items[i] for i in idx]))
                                               for q, idx in self._placed(task.queue_name, items)])
        results = []
        for (result, _), outcome in zip(prepared, stored, strict=False):
            if outcome.duplicate_of:
                found = self.broker.get_task(outcome.duplicate_of, [task.queue_name])
                results.append(self._duplicate_result(result, outcome.duplicate_of, found))
            else:
                task_enqueued.send(type(self), task_result=self._stored(result, outcome))
                results.append(result)
        return results

    async def aenqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        """``enqueue`` on the running event loop, with no thread (store/broker/async_broker.py): the same script and result."""
        return (await self.aenqueue_many(task, [(args, kwargs)]))[0]

    async def aenqueue_many(self, task: Task, arg_sets: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[TaskResult]:
        """``enqueue_many``, awaited on the running loop's own pool; step for step the same."""
        with tracing.send(task.module_path, task.queue_name) as span:
            return await self._aenqueue_many(task, arg_sets, span)

    async def _aenqueue_many(self, task: Task, arg_sets: Iterable[tuple[Sequence[Any], dict[str, Any]]],
                             span: tracing.Sending | tracing._Noop) -> list[TaskResult]:
        self._validated(task)
        if getattr(task, "depends_on", ()):  # a small workflow (workflows/enqueue.py), stored from a thread
            return await asyncio.to_thread(self._enqueue_many, task, list(arg_sets), span)  # in this producer span
        prepared = [self._prepare(task, a, k, span.carrier) for a, k in arg_sets]
        if not prepared:
            return []
        items = [item for _, item in prepared]
        span.identify([item[0] for item in items])
        if self.conf.partitions(task.queue_name) == 1:
            stored = await self.abroker.enqueue(task.queue_name, items)
        else:
            groups = self._placed(task.queue_name, items)
            outs = await asyncio.gather(*(self.abroker.enqueue(q, [items[i] for i in idx]) for q, idx in groups))
            stored = self._merged(len(items), [(idx, out) for (_, idx), out in zip(groups, outs, strict=True)])
        results = []
        for (result, _), outcome in zip(prepared, stored, strict=False):
            if outcome.duplicate_of:
                found = await self.abroker.get_task(outcome.duplicate_of, [task.queue_name])
                results.append(self._duplicate_result(result, outcome.duplicate_of, found))
            else:
                from django_redisq.store.broker.async_broker import send_enqueued

                await send_enqueued(type(self), self._stored(result, outcome))
                results.append(result)
        return results

    def _placed(self, queue: str, items: Sequence[NewTask]) -> list[tuple[str, list[int]]]:
        """Partitioned ``queue``: the physical queue of each item (core/partitions.py), as (queue, item indexes)."""
        n = self.conf.partitions(queue)
        groups: dict[str, list[int]] = {}
        for i, item in enumerate(items):
            groups.setdefault(partitions.pick(queue, n, item.idem), []).append(i)
        return list(groups.items())

    @staticmethod
    def _merged(count: int, parts: Sequence[tuple[list[int], Sequence[Enqueued]]]) -> list[Enqueued]:
        """The outcomes of the per-partition calls back in the order of the items."""
        out: list[Enqueued | None] = [None] * count
        for idx, got in parts:
            for i, outcome in zip(idx, got, strict=True):
                out[i] = outcome
        return [o for o in out if o is not None]

    @staticmethod
    def _stored(result: TaskResult, outcome: Enqueued) -> TaskResult:
        """``result`` with the enqueued_at the script stored, so that refresh() and get_result() agree with it."""
        object.__setattr__(result, "enqueued_at", ms_to_datetime(outcome.enqueued_at))
        return result

    def _duplicate_result(self, result: TaskResult, holder: str, found: tuple[str, dict[str, str]] | None) -> TaskResult:
        """The result of the task holding the idempotency key.

        The key outlives the holder's result when IDEMPOTENCY_TTL exceeds RESULT_TTL. A key
        whose task is gone means the holder succeeded (only a success gives the key a TTL;
        enqueue.lua takes a key whose task vanished otherwise), so this call's result is
        returned under the holder's id as SUCCESSFUL, with an unknown return value (None)
        and no timestamps; ``get_result`` on that id raises ``TaskResultDoesNotExist``.
        A holder left without a message (a dead letter whose data was corrupt) reads as FAILED.
        ``found`` is the holder's task hash, read by the caller (sync or async).
        """
        if found is not None and "msg" in found[1]:
            return self.build_result(holder, found[0], found[1])
        status = TaskResultStatus.SUCCESSFUL if found is None else TaskResultStatus.FAILED
        return dataclasses.replace(result, id=holder, status=status, enqueued_at=None)

    def enqueue_workflow(self, node: Any, on_error: Any = None) -> Any:
        """Enqueue a ``chain``, ``group`` or ``chord`` (workflows/canvas.py); returns a ``WorkflowResult`` (workflows/enqueue.py)."""
        from django_redisq.workflows.enqueue import enqueue_workflow

        return enqueue_workflow(self, node, on_error)

    # -- cancelling ------------------------------------------------------

    def cancel(self, result_id: str, who: str = "api") -> str:
        """Cancel one task of this backend, found by id in its queues (see ``django_redisq.cancel``).

        Returns ``"cancelled"``, ``"requested"`` or ``"finished"``; ``TaskNotFound`` for an unknown id.
        A waiting task is taken out of its queue here, in one atomic step. A running one cannot be:
        only its worker can stop the code, and only the worker holding a task may settle it (so
        it is never moved twice), so this records a request that the worker polls.
        """
        found = self.broker.get_task(result_id, sorted(self.queues)) if isinstance(result_id, str) and 0 < len(result_id) <= 64 else None
        outcome = self.broker.operator.cancel(found[0], [result_id], who)[0] if found else "missing"
        if outcome == "missing":
            raise TaskNotFound(f"no task {result_id!r} in the queues of backend {self.alias!r}")
        if outcome == "cancelled" and found and "_workflow" in str(found[1].get("msg", "")) + str(found[1].get("metadata", "")):
            from django_redisq.workflows.enqueue import fail_cancelled  # a workflow step: its workflow fails (workflows/enqueue.py)

            fail_cancelled(self, found[0], result_id, who)
        return outcome

    # -- results ---------------------------------------------------------

    def save_metadata(self, task_result: TaskResult, metadata: dict[str, Any]) -> None:
        """Store ``metadata`` (reserved keys included) as the task's; Django's ``TaskContext.save_metadata()`` calls this.

        Written at once, from wherever it is called (a running task in any pool,
        a view). ``TypeError`` / ``ValueError`` for metadata that is not JSON or
        is over ``METADATA_MAX_BYTES``; ``TaskResultDoesNotExist`` once the task is gone.
        """
        queue = task_result.task.queue_name
        text = encode_metadata(metadata, self.conf.for_queue(queue).metadata_max_bytes)[1]
        if not self.broker.save_metadata(queue, task_result.id, text):
            raise TaskResultDoesNotExist(task_result.id)

    def resolve_task(self, path: str, queue: str) -> Task:
        """The Task object for a stored path; never anything but a Task."""
        found: Any = get_registered(path)
        if found is None:
            # never import a path read from Redis: load the modules a worker loads, then look again
            discovery.load(discovery.imports_of(self.params))
            found = get_registered(path)
        if not isinstance(found, Task):
            raise InvalidTask(f"task {path!r} is not a registered task (not in an installed app's tasks module?)")
        if found.queue_name != queue or found.backend != self.alias:
            found = found.using(queue_name=queue, backend=self.alias)
        return found

    def get_result(self, result_id: str) -> TaskResult:
        if not isinstance(result_id, str) or not 0 < len(result_id) <= 64:
            raise TaskResultDoesNotExist(result_id)
        return self._found_result(result_id, self.broker.get_task(result_id, sorted(self.queues)))

    async def aget_result(self, result_id: str) -> TaskResult:
        """``get_result`` on the running event loop, with no thread (store/broker/async_broker.py); ``arefresh`` comes here too."""
        if not isinstance(result_id, str) or not 0 < len(result_id) <= 64:
            raise TaskResultDoesNotExist(result_id)
        return self._found_result(result_id, await self.abroker.get_task(result_id, sorted(self.queues)))

    def _found_result(self, result_id: str, found: tuple[str, dict[str, str]] | None) -> TaskResult:
        if found is None or "msg" not in found[1]:
            from django_redisq.workflows.enqueue import waiting_result  # a workflow step not queued yet?

            if (waiting := waiting_result(self, result_id)) is not None:
                return waiting
            raise TaskResultDoesNotExist(result_id)
        return self.build_result(result_id, found[0], found[1])

    def build_result(self, task_id: str, queue: str, data: dict[str, str]) -> TaskResult:
        """A ``TaskResult`` from a task hash."""
        try:
            msg = json.loads(data["msg"])
        except (ValueError, RecursionError):
            msg = None
        if not isinstance(msg, dict):
            msg = {}  # a message that does not decode: the worker dead-letters it; show the rest
        task = self.resolve_task(data.get("task") or msg.get("task", ""), partitions.logical(queue))
        priority = stored_priority(data.get("prio"))
        if priority != task.priority:
            task = task.using(priority=priority)
        over = msg.get("o")
        if isinstance(task, RedisTask) and isinstance(over, dict) and over and set(over) <= set(OVERRIDES):
            try:  # the task as it was enqueued (task.using(max_retries=...)), as Django's backends return it
                changes: dict[str, Any] = {"max_attempts": None, **over} if "max_retries" in over else dict(over)
                task = dataclasses.replace(task, **changes)
            except InvalidTask:
                pass  # a value this version refuses: the registered task's own options, as the worker uses
        from django_redisq.store.reads.records import stored_errors  # the read side's records: a worker's start needs none

        errors = [
            TaskError(exception_class_path=e["exc"], traceback=e["tb"] or e["msg"])
            for e in stored_errors(data.get("errors"), data.get("errors_dropped"))
        ]
        workers = [w for w in (data.get("workers") or "").split(",") if w]
        status = STATE_TO_STATUS.get(data.get("state", ""), TaskResultStatus.READY)
        result: TaskResult = self.result_class(
            task=task, id=task_id, status=status,
            enqueued_at=ms_to_datetime(data.get("enqueued_at")),
            started_at=ms_to_datetime(data.get("started_at")),
            finished_at=ms_to_datetime(data.get("finished_at") or data.get("died_at")),
            last_attempted_at=ms_to_datetime(data.get("last_attempted_at")),
            args=msg.get("args", []) if isinstance(msg.get("args"), list) else [],
            kwargs=msg.get("kwargs", {}) if isinstance(msg.get("kwargs"), dict) else {}, backend=self.alias,
            errors=errors, worker_ids=workers,
        )
        attach(result, stored(data.get("metadata"), msg.get("m")))
        if status == TaskResultStatus.SUCCESSFUL and "result" in data:
            try:
                object.__setattr__(result, "_return_value", json.loads(data["result"]))
            except (ValueError, RecursionError):
                object.__setattr__(result, "_return_value", data["result"])
        return result


def _progress_backend(task_id_or_result: str | TaskResult[Any, Any], backend: str) -> tuple[RedisQueueBackend, str]:
    if isinstance(task_id_or_result, TaskResult):
        backend, task_id_or_result = task_id_or_result.backend, task_id_or_result.id
    found = task_backends[backend]
    if not isinstance(found, RedisQueueBackend):
        raise InvalidTaskBackend(f"TASKS[{backend!r}] is not a django_redisq backend: it stores no progress")
    if not isinstance(task_id_or_result, str) or not 0 < len(task_id_or_result) <= 64:
        raise TaskResultDoesNotExist(task_id_or_result)
    return found, task_id_or_result


def _read_progress(task_id: str, found: tuple[str, dict[str, str]] | None) -> Progress | None:
    if found is None or "msg" not in found[1]:
        raise TaskResultDoesNotExist(task_id)
    return decode_progress(found[1].get("progress"), ms_to_datetime(found[1].get("progress_at")))


def get_progress(task_id_or_result: str | TaskResult[Any, Any], *, backend: str = DEFAULT_TASK_BACKEND_ALIAS) -> Progress | None:
    """What the task last reported with ``report_progress`` (progress.py), or None if it reported nothing yet.

    By id (on ``backend``) or by its ``TaskResult`` (its own backend). ``TaskResultDoesNotExist``
    when there is no such task (or it expired); one read of the task hash, as ``get_result``.
    """
    found, task_id = _progress_backend(task_id_or_result, backend)
    return _read_progress(task_id, found.broker.get_task(task_id, sorted(found.queues)))


async def aget_progress(task_id_or_result: str | TaskResult[Any, Any], *, backend: str = DEFAULT_TASK_BACKEND_ALIAS) -> Progress | None:
    """``get_progress`` on the running event loop, with no thread (the async broker's read, as ``aget_result``)."""
    found, task_id = _progress_backend(task_id_or_result, backend)
    return _read_progress(task_id, await found.abroker.get_task(task_id, sorted(found.queues)))


def cancel(task_id_or_result: str | TaskResult, *, backend: str = DEFAULT_TASK_BACKEND_ALIAS, who: str = "api") -> str:
    """Cancel a task by id or by its ``TaskResult`` (whose own backend is used); it is never retried.

    A pending or scheduled task is dead-lettered at once (``"cancelled"``); a running one is
    stopped by its worker within about a second (``"requested"``); a finished or dead one is
    left alone (``"finished"``). A cancelled task's result is FAILED with a ``TaskCancelled``
    error, "cancelled by <who>", and it shows as a dead letter with reason ``cancelled``
    (replay runs it after all). Raises ``TaskNotFound`` for an id that is in none of the
    backend's queues, and ``InvalidTaskBackend`` for a backend that is not django_redisq's.
    """
    if isinstance(task_id_or_result, TaskResult):
        alias, task_id = task_id_or_result.backend, task_id_or_result.id
    else:
        alias, task_id = backend, task_id_or_result
    found = task_backends[alias]
    if not isinstance(found, RedisQueueBackend):
        raise InvalidTaskBackend(f"TASKS[{alias!r}] is not a django_redisq backend: it cannot cancel tasks")
    return found.cancel(task_id, who=who)
