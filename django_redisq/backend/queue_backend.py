"""``RedisQueueBackend``: the Django Tasks backend (checks, validation, enqueue, cancel, results)."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterable, Sequence
from functools import cached_property, partial
from importlib import import_module
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from django_redisq.backend.by_alias import progress_plan
from django_redisq.backend.results import build_result, result_plan
from django_redisq.backend.sending import batch, holders, overrides
from django_redisq.backend.wire import arun, run
from django_redisq.compat import BaseTaskBackend, InvalidTask, Task, TaskContext, TaskResult, TaskResultDoesNotExist, task_enqueued
from django_redisq.core import tracing
from django_redisq.core.fit import Fit
from django_redisq.core.metadata import encode as encode_metadata
from django_redisq.core.options import Options
from django_redisq.durable.context import DurableContext
from django_redisq.exceptions import InvalidArguments, TaskNotFound
from django_redisq.progress import Progress
from django_redisq.settings import discovery
from django_redisq.settings.read import TOP_LEVEL, build_options, check_errors
from django_redisq.store.broker import Broker
from django_redisq.store.server import door
from django_redisq.store.workflows import WorkflowStore
from django_redisq.task import RedisTask, find_registered, plain_signature
from django_redisq.workflows import enqueue as workflows
from django_redisq.workflows.canvas import Node, Signature
from django_redisq.workflows.engine import WorkflowEngine
from django_redisq.workflows.result import WorkflowResult

if TYPE_CHECKING:  # the async steps load on first use: a worker (threads) or a sync caller never needs them
    from django_redisq.store.broker.async_broker import AsyncBroker


NOT_INSTALLED = ("{where} uses django_redisq's RedisQueueBackend, but django_redisq is not in INSTALLED_APPS: "
                 "no worker could run its tasks (`manage.py runworker` is an unknown command).")
"""Check E082, and what an enqueue raises then."""

VALIDATED_MAX = 512
"""Task objects a backend remembers as validated (``validated``)."""
_conf = attrgetter("conf")  # the server a backend's door meant (store/server.py door)


def app_configured() -> bool:
    """Whether ``django_redisq`` is installed: in the app registry, or named in ``settings.INSTALLED_APPS`` (its
    package or one of its modules, e.g. its AppConfig). The setting too, because a ``TransactionTestCase``'s
    ``available_apps`` narrows the registry for its tests, and an enqueue there is still a project's enqueue."""
    return apps.is_installed("django_redisq") or any(
        entry == "django_redisq" or entry.startswith("django_redisq.") for entry in settings.INSTALLED_APPS)


class RedisQueueBackend(BaseTaskBackend):
    """Tasks stored in Redis and run by ``manage.py runworker``.

    Built per thread at import time by Django: ``__init__`` does no I/O;
    options and the connection are resolved on first use.
    """

    is_redisq_backend: ClassVar[bool] = True  # workflows/port.py: find_backend reads it
    task_class = RedisTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True  # higher first, FIFO within a priority (store/scripts/lib/ready.lua)
    supports_metadata = True  # Task.metadata and save_metadata(), where the running Django has them
    result_class: type[TaskResult] = TaskResult
    """The results this backend and its workers build (a subclass may give others; the tests' stand-ins do)."""
    context_class: type[TaskContext] = DurableContext
    """The ``TaskContext`` a worker gives a task that takes one: with durable steps, sleeps and waits (durable/)."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.params = params
        self._valid: dict[int, Task] = {}  # id -> the task objects validate_task passed (Tasks are immutable)
        self._enqueueing: set[int] = set()  # ids of tasks validate_task checks for an enqueue (none lenient)
        self._signatures: dict[Any, Fit] = {}  # task function -> how its arguments are checked (core/fit.py)
        if apps.ready and not app_configured():
            # check E082 runs only if django.tasks was imported before the checks started: a project whose URLconf
            # is the first to import its tasks registers Django's task checks during the URL check, too late for it
            warnings.warn(NOT_INSTALLED.format(where=f"TASKS[{alias!r}]") + ' Add "django_redisq" to INSTALLED_APPS.',
                          RuntimeWarning, stacklevel=2)
        if isinstance(params.get("OPTIONS"), dict) and params["OPTIONS"].get("LIFECYCLE_EVENTS") is True:
            # not a cycle: lifecycle events are off by default, and a backend without them never loads their module
            from django_redisq.events import lifecycle

            lifecycle.connect()

    def validated(self, task: Task) -> None:
        """``validate_task`` once per task object: ``.delay()`` on a module-level task pays for it once, not per call.

        A task object is frozen, and what the check reads of this backend is fixed at
        its creation. The entry holds the object, so its id cannot be reused while it is
        listed; a program that makes a new ``task.using(...)`` per call is checked per
        call, and the list is emptied when it reaches ``VALIDATED_MAX``.
        """
        if self._valid.get(id(task)) is not task:
            if not app_configured():  # check E082, which runs only if django.tasks was imported before it
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

    def bind(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
        """``InvalidArguments`` (a ``TypeError``) for a call that can never run: the arguments do not fit the function."""
        fit = self._signatures.get(task.func)
        if fit is None:
            if len(self._signatures) >= VALIDATED_MAX:
                self._signatures.clear()
            fit = self._signatures[task.func] = Fit.of(task.func)
        try:
            fit.check([None, *args] if task.takes_context else args, kwargs)
        except TypeError as exc:
            raise InvalidArguments(f"{task.module_path}{plain_signature(fit.signature)} cannot be called with these "
                                   f"arguments: {exc}.") from None

    @cached_property
    def conf(self) -> Options:
        return build_options(self.alias, self.params)

    @cached_property
    def broker(self) -> Broker:
        return Broker(self.conf)

    @cached_property
    def abroker(self) -> AsyncBroker:
        """The broker of ``aenqueue`` / ``aget_result``: the same steps on the running loop's own pool."""
        from django_redisq.store.broker.async_broker import AsyncBroker  # not a cycle: a sync process never loads the async steps

        return AsyncBroker(self.broker)

    @cached_property
    def workflows(self) -> WorkflowEngine:
        """The workflow engine of this backend (workflows/engine.py), on its broker."""
        return WorkflowEngine(WorkflowStore(self.broker))

    def check(self, **kwargs: Any) -> list[Any]:
        # not a cycle: the checks of schedules and subscriptions are loaded by ``manage.py check``, not by an enqueue
        from django.core.checks import Error

        from django_redisq.events import subscriptions  # (as above: loaded by manage.py check)
        from django_redisq.schedules import registry as schedules  # (as above)

        where = f"TASKS[{self.alias!r}]"
        errors = check_errors(self.alias, self.params, obj=where) + schedules.check_errors(self.alias, self.params, obj=where)
        errors += subscriptions.check_errors(self.alias, self.params, obj=where)  # events (E100-E107)
        if not app_configured():
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

    @staticmethod
    def overrides(task: Task) -> dict[str, Any]:
        """What ``task.using(...)`` changed from the registered task: it travels with the call."""
        return overrides(task)

    def enqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        return self.enqueue_many(task, [(args, kwargs)])[0]

    @door(_conf)
    def enqueue_many(self, task: Task, arg_sets: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[TaskResult]:
        """Enqueue several calls of one task in a single round trip (one per partition of a partitioned queue)."""
        with tracing.send(task.module_path, task.queue_name) as span:  # NOOP unless a tracer provider is configured
            self.validated(task)
            if isinstance(task, RedisTask) and task.depends_on:
                return self._dependents(task, arg_sets, span)
            ready = batch(self, task, arg_sets, span)  # backend/sending.py: all but the I/O, for both wires
            outcomes = ready.outcomes([self.broker.enqueue(queue, items, fresh=True) for queue, items in ready.sends])
            held = {holder: self.broker.get_task(holder, [task.queue_name]) for holder in holders(outcomes)}
            results, new = ready.results(self, outcomes, held)
            for result in new:
                task_enqueued.send(type(self), task_result=result)
            return results

    async def aenqueue(self, task: Task, args: Sequence[Any], kwargs: dict[str, Any]) -> TaskResult:
        """``enqueue`` on the running event loop, with no thread (store/broker/async_broker.py): the same script and result."""
        return (await self.aenqueue_many(task, [(args, kwargs)]))[0]

    @door(_conf)
    async def aenqueue_many(self, task: Task, arg_sets: Iterable[tuple[Sequence[Any], dict[str, Any]]]) -> list[TaskResult]:
        """``enqueue_many`` awaited on the running loop's own pool: the same ``Batch``, its sends at once."""
        with tracing.send(task.module_path, task.queue_name) as span:
            self.validated(task)
            if isinstance(task, RedisTask) and task.depends_on:  # a small workflow, stored from a thread
                return await asyncio.to_thread(self._dependents, task, list(arg_sets), span)
            ready = batch(self, task, arg_sets, span)
            outcomes = ready.outcomes(await asyncio.gather(*(self.abroker.enqueue(queue, items, fresh=True) for queue, items in ready.sends)))
            held = {holder: await self.abroker.get_task(holder, [task.queue_name]) for holder in holders(outcomes)}
            results, new = ready.results(self, outcomes, held)
            from django_redisq.store.broker.async_broker import send_enqueued  # the async steps load on first await, never in a worker

            for result in new:
                await send_enqueued(type(self), result)
            return results

    def _dependents(self, task: RedisTask[Any, Any], arg_sets: Iterable[tuple[Sequence[Any], dict[str, Any]]],
                    span: tracing.Sending | tracing.Noop) -> list[TaskResult]:
        """``task.using(depends_on=[...])``: each call a small workflow (workflows/enqueue.py), in this producer span."""
        dependents = [workflows.enqueue_dependent(self, task, list(a), dict(k), span.carrier) for a, k in arg_sets]
        if dependents:
            span.identify([r.id for r in dependents])  # the steps' ids; their spec carries span.carrier (core/tracing.py)
        return dependents

    @door(_conf)
    def enqueue_workflow(self, node: Node, on_error: Signature | None = None) -> WorkflowResult:
        """Enqueue a ``chain``, ``group`` or ``chord`` (workflows/canvas.py); returns a ``WorkflowResult``."""
        return workflows.enqueue_workflow(self, node, on_error)

    # -- cancelling ------------------------------------------------------

    @door(_conf)
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
            workflows.fail_cancelled(self, found[0], result_id, who)  # a workflow step: its workflow fails
        return outcome

    # -- results ---------------------------------------------------------

    @door(_conf)
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
        # never import a path read from Redis: load the modules a worker loads, then look again
        found: Any = find_registered(path, partial(discovery.load, discovery.imports_of(self.params)))
        if not isinstance(found, Task):
            raise InvalidTask(f"task {path!r} is not a registered task (not in an installed app's tasks module?)")
        if found.queue_name != queue or found.backend != self.alias:
            found = found.using(queue_name=queue, backend=self.alias)
        return found

    @door(_conf)
    def get_result(self, result_id: str) -> TaskResult:
        return run(result_plan(self, result_id), self.broker)

    @door(_conf)
    async def aget_result(self, result_id: str) -> TaskResult:
        """``get_result`` on the running event loop, with no thread (store/broker/async_broker.py); ``arefresh`` comes here too."""
        return await arun(result_plan(self, result_id), self.abroker)

    @door(_conf)
    def get_progress(self, task_id: str) -> Progress | None:
        """What task ``task_id`` last reported with ``report_progress`` (``django_redisq.get_progress``)."""
        return run(progress_plan(sorted(self.queues), task_id), self.broker)

    @door(_conf)
    async def aget_progress(self, task_id: str) -> Progress | None:
        return await arun(progress_plan(sorted(self.queues), task_id), self.abroker)

    def build_result(self, task_id: str, queue: str, data: dict[str, str]) -> TaskResult:
        """A ``TaskResult`` from a task hash."""
        return build_result(self, task_id, queue, data)
