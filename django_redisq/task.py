"""The ``@task`` decorator and our Django ``Task`` subclass.

Every task built with this class registers itself by dotted path; the worker
runs only registered tasks, so a message can never make it import or call an
arbitrary function.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from inspect import isclass
from typing import TYPE_CHECKING, Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, cast, overload

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from django_redisq.compat import (
    DEFAULT_TASK_BACKEND_ALIAS,
    DEFAULT_TASK_PRIORITY,
    DEFAULT_TASK_QUEUE_NAME,
    InvalidTask,
    Task,
    TaskContext,
    TaskResult,
    task_backends,
)
from django_redisq.core.backoff import check_backoff
from django_redisq.core.keyed import KEY_OPTIONS, WINDOW_OPTIONS, check_task
from django_redisq.core.limits import check_max_running, check_rate
from django_redisq.workflows.canvas import Signature

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")

if TYPE_CHECKING:
    _TaskOf = Task  # the type checker's Task is generic (django-stubs: Task[P, R])
else:
    class _TaskOf(Task, Generic[P, R]):
        """Django's Task, subscriptable at run time (``RedisTask[[int], str]``) as it is for type checkers."""

        __slots__ = ()

USING_OPTIONS = frozenset({"max_retries", "max_attempts", "backoff", "backoff_base", "backoff_max", "retry_on", "no_retry_on",
                           "idempotency_key", "timeout", "depends_on", *KEY_OPTIONS, *WINDOW_OPTIONS})
"""This class's options that ``using()`` changes; any other goes to Django's ``Task.using()``."""

_registry: dict[str, RedisTask[Any, Any]] = {}
_registry_lock = threading.Lock()


def _tasks_configured() -> bool:
    """Whether the project sets ``TASKS`` (else Django's default backend, which E081 reports when our app is installed)."""
    return bool(settings.is_overridden("TASKS"))  # type: ignore[misc]


def _as_exceptions(value: Any, name: str) -> tuple[type[BaseException], ...]:
    items = value if isinstance(value, (tuple, list)) else (value,)
    for item in items:
        if not (isclass(item) and issubclass(item, BaseException)):
            raise InvalidTask(f"{name} must be an exception class or a tuple of them, got {item!r}.")
    return tuple(items)


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisTask(_TaskOf[P, R]):
    """A Django Task with retry policy, an idempotency key and ``.delay()``.

    Generic over the function's parameters ``P`` and its return type ``R``, as
    django-stubs types Django's ``Task[P, R]``: ``@task`` on ``def f(order_id: int) -> str``
    gives a ``RedisTask[[int], str]``, so a type checker flags ``f.delay("x")`` and knows
    that ``f.get_result(id).return_value`` is a ``str``. ``using()`` keeps both.

    ``None`` means "inherit from the queue's options". Django's retry proposal
    (new-features #142) names two of them its own way: ``max_attempts=N`` is
    ``max_retries=N - 1`` (either sets both), and ``backoff``, a function
    ``(exception, task_result) -> seconds | None``, replaces the exponential
    ``backoff_base`` / ``backoff_max`` delay (None: no more attempts; see core/backoff.py).
    """

    max_retries: int | None = None
    max_attempts: int | None = None  # max_retries + 1: attempts in all, the first one included
    backoff: Callable[[BaseException, TaskResult[Any, Any]], float | None] | None = None
    backoff_base: float | None = None
    backoff_max: float | None = None
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    no_retry_on: tuple[type[BaseException], ...] = ()
    idempotency_key: str | Callable[..., str] | None = None
    timeout: float | None = None  # seconds a run may take on a worker; 0 = no limit
    max_running: int | None = None  # at most this many run at once, fleet-wide (core/limits.py)
    rate_limit: str | None = None  # at most this many starts per period, fleet-wide: "10/s", "100/m"
    limit_key: str | Callable[..., Any] | None = None  # max_running and rate_limit count per key (core/keyed.py)
    fair_key: str | Callable[..., Any] | None = None  # a FAIR queue serves its keys round-robin
    debounce: float | None = None  # seconds: a burst of one idempotency key runs once, with the last call's arguments
    throttle: float | None = None  # seconds: at most one run per idempotency key per window
    depends_on: tuple[str, ...] = ()  # ids of tasks that must succeed first (``using(depends_on=[result, ...])``, workflows/enqueue.py)

    def __post_init__(self) -> None:
        try:
            Task.__post_init__(self)  # zero-argument super() does not work in slotted dataclasses
        except InvalidTask:
            if _tasks_configured():
                raise
            # TASKS not set: Django's default backend refused the task (a queue_name it does not know)
            # while its module is imported, often during `check` (a traceback); the setup is the
            # mistake, which the system check django_redisq.E081 names
        attempts = self.max_attempts
        if attempts is not None:
            if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
                raise InvalidTask(f"max_attempts must be a whole number >= 1, got {attempts!r}.")
            if self.max_retries is not None and self.max_retries != attempts - 1:
                raise InvalidTask(f"max_attempts={attempts} and max_retries={self.max_retries} disagree: give one of them.")
            object.__setattr__(self, "max_retries", attempts - 1)
        elif isinstance(self.max_retries, int) and not isinstance(self.max_retries, bool) and self.max_retries >= 0:
            object.__setattr__(self, "max_attempts", self.max_retries + 1)
        if self.max_retries is not None and (
            isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0
        ):
            raise InvalidTask(f"max_retries must be a whole number >= 0, got {self.max_retries!r}.")
        for name in ("backoff_base", "backoff_max", "timeout"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf")
            ):
                extra = " (0 = no time limit)" if name == "timeout" else ""
                raise InvalidTask(f"{name} must be a number of seconds >= 0{extra}, got {value!r}.")
        if self.backoff is not None:
            check_backoff(self.backoff)
        if problem := check_max_running(self.max_running):
            raise InvalidTask(f"max_running {problem}.")
        if problem := check_rate(self.rate_limit):
            raise InvalidTask(f"{problem}.")
        if problem := check_task(self):
            raise InvalidTask(f"{problem}.")
        object.__setattr__(self, "retry_on", _as_exceptions(self.retry_on, "retry_on"))
        object.__setattr__(self, "no_retry_on", _as_exceptions(self.no_retry_on, "no_retry_on"))
        key = self.idempotency_key
        if key is not None and not (callable(key) or (isinstance(key, str) and 0 < len(key) <= 200)):
            raise InvalidTask("idempotency_key must be a callable of the task's arguments or a string of 1-200 characters.")
        path = self.module_path
        if path not in _registry:
            with _registry_lock:
                _registry.setdefault(path, self)

    def using(
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: Any = None,
        backend: str | None = None,
        **options: Any,
    ) -> RedisTask[P, R]:
        """Django's ``using()``, plus this class's options (``idempotency_key="order-42"``); ``run_after`` may also be a
        ``timedelta`` from now.

        Options that are not ours go to Django's ``using()``, so one a newer Django
        adds (``metadata=``) works as Django defines it, and one no Django knows gets
        Django's own ``TypeError``.
        """
        if isinstance(run_after, timedelta):  # "in five minutes": Django's own using() takes a datetime only
            run_after = timezone.now() + run_after
        ours = {k: options.pop(k) for k in list(options) if k in USING_OPTIONS}
        if "depends_on" in ours:
            ours["depends_on"] = _task_ids(ours["depends_on"])
        if ("max_retries" in ours) != ("max_attempts" in ours):  # one given: the other follows from it
            ours.setdefault("max_attempts", None)
            ours.setdefault("max_retries", None)
        changed = cast("RedisTask[P, R]", Task.using(self, priority=priority, queue_name=queue_name, run_after=run_after, backend=backend, **options))
        return replace(changed, **ours) if ours else changed

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step of this call that gets its parent's result first (workflows/canvas.py: ``chain``, ``group``, ``chord``)."""
        return Signature(self, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """A workflow step of this call that ignores its parents' results (it only waits for them)."""
        return Signature(self, args, kwargs, immutable=True)

    if not TYPE_CHECKING:  # at run time only: a type checker still says that a task is not callable
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            """Celery's tasks run when called; a Django Task does not. Say what to write instead of "not callable"."""
            name = self.func.__name__
            raise TypeError(f"a task is not called like a function: {name}.enqueue(...) (or {name}.delay(...)) runs it "
                            f"in a worker, {name}.call(...) runs it here and now")

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> TaskResult[P, R]:
        """Enqueue now; the Celery spelling of ``enqueue``."""
        return self.enqueue(*args, **kwargs)

    def delay_on_commit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Enqueue once the current transaction commits; nothing if it rolls back."""
        transaction.on_commit(partial(self.enqueue, *args, **kwargs))

    def enqueue_many(self, arg_sets: Sequence[tuple[Sequence[Any], dict[str, Any]]]) -> list[TaskResult[P, R]]:
        """Enqueue many calls ``[(args, kwargs), ...]`` in one round trip."""
        backend = self.get_backend()
        many = getattr(backend, "enqueue_many", None)
        if many is None:
            return [backend.enqueue(self, list(a), dict(k)) for a, k in arg_sets]
        return cast("list[TaskResult[P, R]]", many(self, arg_sets))

    def key_for(self, args: Sequence[Any], kwargs: dict[str, Any]) -> str:
        """The idempotency key of one call, or ''."""
        key = self.idempotency_key
        if key is None:
            return ""
        if callable(key):
            key = key(*args, **kwargs)
            if not isinstance(key, str) or not 0 < len(key) <= 200:
                raise InvalidTask(f"idempotency_key() must return a string of 1-200 characters, got {key!r}.")
        return key


def _task_ids(results: Any) -> tuple[str, ...]:
    """``depends_on=[TaskResult | task id, ...]`` as ids; ``InvalidTask`` for anything else."""
    if isinstance(results, (str, TaskResult)):
        results = [results]
    try:
        items = list(results)
    except TypeError:
        raise InvalidTask(f"depends_on must be a list of TaskResults or task ids, got {results!r}.") from None
    ids = tuple(r.id if isinstance(r, TaskResult) else r for r in items)
    if not all(isinstance(i, str) and 0 < len(i) <= 64 for i in ids):
        raise InvalidTask(f"depends_on must be a list of TaskResults or task ids, got {results!r}.")
    return ids


def plain_signature(sig: inspect.Signature) -> str:
    """``(a, b=2, *, c)``: a signature without its annotations, as an error message shows it."""
    return str(sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                           return_annotation=sig.empty))


def get_registered(path: str) -> RedisTask[Any, Any] | None:
    """The task registered under ``path``: only these are ever run by a worker."""
    return _registry.get(path)


def registered_modules() -> set[str]:
    """The modules that define the registered tasks: what a process-pool child imports to run what its worker runs."""
    return {t.func.__module__ for t in list(_registry.values())}


def find_registered(path: str, load: Callable[[], object] | None = None) -> RedisTask[Any, Any] | None:
    """The task registered under ``path``, looked for again after ``load()`` if it is not yet: the one way a task is
    found by its path. ``load`` imports the modules that register tasks (the caller's policy: a path read from Redis
    is never imported itself, backend/queue_backend.py; a path from settings may be, schedules/registry.py)."""
    found = _registry.get(path)
    if found is None and load is not None:
        load()
        found = _registry.get(path)
    return found


# The overloads follow django-stubs' ``django.tasks.task``: a coroutine function's task returns what it awaits
# (``call()`` and the worker await it), and a task that takes a context is called without it.
@overload
def task(function: Callable[P, Coroutine[Any, Any, R]], /) -> RedisTask[P, R]: ...
@overload
def task(function: Callable[P, R], /) -> RedisTask[P, R]: ...
@overload
def task(
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: Literal[True],
    **options: Any,
) -> _ContextDecorator: ...
@overload
def task(
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: Literal[False] = ...,
    **options: Any,
) -> _Decorator: ...


def task(
    function: Callable[..., Any] | None = None,
    *,
    priority: int = DEFAULT_TASK_PRIORITY,
    queue_name: str = DEFAULT_TASK_QUEUE_NAME,
    backend: str = DEFAULT_TASK_BACKEND_ALIAS,
    takes_context: bool = False,
    **options: Any,
) -> RedisTask[Any, Any] | _Decorator | _ContextDecorator:
    """Make a function a task: ``@task`` or ``@task(queue_name="emails", max_retries=5)``."""
    if "run_after" in options:
        raise TypeError("run_after cannot be set in @task; use .using(run_after=...) when enqueueing.")

    def wrapper(f: Callable[..., Any]) -> RedisTask[Any, Any]:
        cls = task_backends[backend].task_class
        if not (isclass(cls) and issubclass(cls, RedisTask)):
            cls = RedisTask
        # run_after=None spelled out: Django 6.0's Task fields have no defaults (6.1 gave them some)
        return cls(func=f, priority=priority, queue_name=queue_name, backend=backend, takes_context=takes_context, run_after=None, **options)

    if function is not None:
        return wrapper(function)
    return cast("_Decorator", wrapper)


class _Decorator:
    """What ``@task(...)`` returns, as a type checker sees it: a decorator keeping the function's types."""

    @overload
    def __call__(self, function: Callable[P, Coroutine[Any, Any, R]], /) -> RedisTask[P, R]: ...
    @overload
    def __call__(self, function: Callable[P, R], /) -> RedisTask[P, R]: ...
    def __call__(self, function: Callable[..., Any], /) -> RedisTask[Any, Any]:
        raise NotImplementedError  # never built: task() returns a plain function typed as this class


class _ContextDecorator:
    """What ``@task(takes_context=True, ...)`` returns, as a type checker sees it: the context is not a parameter of the calls."""

    @overload
    def __call__(self, function: Callable[Concatenate[TaskContext[Any, Any], P], Coroutine[Any, Any, R]], /) -> RedisTask[P, R]: ...
    @overload
    def __call__(self, function: Callable[Concatenate[TaskContext[Any, Any], P], R], /) -> RedisTask[P, R]: ...
    def __call__(self, function: Callable[..., Any], /) -> RedisTask[Any, Any]:
        raise NotImplementedError  # never built: task() returns a plain function typed as this class
