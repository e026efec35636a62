"""What an enqueue sends and what it answers, built once for both wires: the new tasks, their placement in a
partitioned queue (``Batch.sends``), and the results the caller gets back from the store's replies (a duplicate's
holder, the stored enqueue time). The backend's ``enqueue_many`` and ``aenqueue_many`` only carry the I/O.

Not a plan of backend/wire.py, on purpose: ``.delay()`` is the hot path, and a plan's generator and step objects
cost 10 us of its 40 us of Python per call."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from django_redisq.compat import InvalidTask, Task, TaskResult, TaskResultStatus
from django_redisq.core import partitions, tracing
from django_redisq.core.clock import ms_to_datetime
from django_redisq.core.keyed import own_limits
from django_redisq.core.message import OVERRIDES, encode_call
from django_redisq.core.metadata import attach
from django_redisq.core.metadata import encode as encode_metadata
from django_redisq.exceptions import InvalidArguments
from django_redisq.store.steps.replies import Enqueued, NewTask
from django_redisq.task import RedisTask, get_registered
from django_redisq.workflows.port import Backend

ID_START = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def new_task_id() -> str:
    """32 characters, 192 random bits; never one a shell command line would take for an option (``-x...``)."""
    task_id = secrets.token_urlsafe(24)
    if task_id[0] == "-":
        task_id = secrets.choice(ID_START) + task_id[1:]
    return task_id


def overrides(task: Task) -> dict[str, Any]:
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


def prepare(backend: Backend, task: Task, args: Sequence[Any], kwargs: dict[str, Any],
            trace: dict[str, str] | None = None) -> tuple[TaskResult, NewTask]:
    """One call's result (READY) and the task to store; ``trace``: the producer span's context (core/tracing.py)."""
    backend.bind(task, args, kwargs)
    conf = backend.conf
    metadata = getattr(task, "metadata", None)  # Django's metadata proposal: a field of newer Tasks
    metadata = tracing.with_trace(metadata, trace)
    if metadata:
        try:
            metadata = encode_metadata(metadata, conf.for_queue(task.queue_name).metadata_max_bytes)[0]
        except (TypeError, ValueError) as exc:
            raise InvalidArguments(f"the task's {exc}") from None
    args, kwargs, msg = encode_call(args, kwargs, conf.max_message_bytes, overrides(task), metadata or None)
    if metadata and len(msg) > conf.max_message_bytes:
        raise InvalidArguments(f"the task's arguments and metadata are over {conf.max_message_bytes} bytes (MAX_MESSAGE_BYTES).")
    task_id = new_task_id()
    delay_ms = 0
    if task.run_after is not None:  # a relative delay: the due time itself is computed from Redis TIME
        delay_ms = max(0, int((task.run_after - timezone.now()).total_seconds() * 1000))
    idem = task.key_for(args, kwargs) if isinstance(task, RedisTask) else ""
    result = ready_result(backend.result_class, task, task_id, args, kwargs, backend.alias)
    attach(result, metadata or {})
    try:
        limits = own_limits(task, args, kwargs, fair=conf.for_queue(task.queue_name).fair, idem=idem)
    except ValueError as exc:
        raise InvalidTask(str(exc)) from None
    return result, NewTask(task_id, msg, task.module_path, delay_ms, idem, int(task.priority), limits)


_READY_FIELDS = frozenset({"task", "id", "status", "enqueued_at", "started_at", "finished_at", "last_attempted_at", "args",
                           "kwargs", "backend", "errors", "worker_ids", "_return_value"})
_direct: dict[type, bool] = {}


def ready_result(cls: type[TaskResult], task: Task, task_id: str, args: list[Any], kwargs: dict[str, Any], alias: str) -> TaskResult:
    """A call's READY result. Built field by field where the class is Django's own shape: its ``__post_init__`` only runs
    ``normalize_json`` over arguments ``encode_call`` has normalized already, and the dataclass's ``__init__`` and
    that pass were 6 us of the 40 us of Python a ``.delay()`` costs. A class with other fields (a newer Django, a
    project's own subclass) or its own ``__init__`` or ``__post_init__`` is built the ordinary way."""
    direct = _direct.get(cls)
    if direct is None:
        direct = _direct[cls] = (
            {f.name for f in dataclasses.fields(cls)} <= _READY_FIELDS | {"raw_metadata"}
            and cls.__init__ is TaskResult.__init__ and cls.__post_init__ is TaskResult.__post_init__)  # type: ignore[attr-defined]
    if not direct:
        return cls(task=task, id=task_id, status=TaskResultStatus.READY, enqueued_at=None, started_at=None,
                   last_attempted_at=None, finished_at=None, args=args, kwargs=kwargs, backend=alias, errors=[], worker_ids=[])
    result = object.__new__(cls)
    put = object.__setattr__
    put(result, "task", task)
    put(result, "id", task_id)
    put(result, "status", TaskResultStatus.READY)
    put(result, "enqueued_at", None)
    put(result, "started_at", None)
    put(result, "finished_at", None)
    put(result, "last_attempted_at", None)
    put(result, "args", args)
    put(result, "kwargs", kwargs)
    put(result, "backend", alias)
    put(result, "errors", [])
    put(result, "worker_ids", [])
    put(result, "_return_value", None)
    return result


def stored(result: TaskResult, outcome: Enqueued) -> TaskResult:
    """``result`` with the enqueued_at the script stored, so that refresh() and get_result() agree with it."""
    object.__setattr__(result, "enqueued_at", ms_to_datetime(outcome.enqueued_at))
    return result


def duplicate_result(backend: Backend, result: TaskResult, holder: str, found: tuple[str, dict[str, str]] | None) -> TaskResult:
    """The result of the task holding the idempotency key.

    The key outlives the holder's result when IDEMPOTENCY_TTL exceeds RESULT_TTL. A key
    whose task is gone means the holder succeeded (only a success gives the key a TTL;
    enqueue.lua takes a key whose task vanished otherwise), so this call's result is
    returned under the holder's id as SUCCESSFUL, with an unknown return value (None)
    and no timestamps; ``get_result`` on that id raises ``TaskResultDoesNotExist``.
    A holder left without a message (a dead letter whose data was corrupt) reads as FAILED.
    ``found`` is the holder's task hash.
    """
    if found is not None and "msg" in found[1]:
        return backend.build_result(holder, found[0], found[1])
    status = TaskResultStatus.SUCCESSFUL if found is None else TaskResultStatus.FAILED
    return dataclasses.replace(result, id=holder, status=status, enqueued_at=None)


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs a microsecond on every .delay()
class Batch:
    """Several calls of one task, ready to send: one enqueue.lua call per physical queue they go to (``sends``)."""

    prepared: list[tuple[TaskResult, NewTask]]
    """Each call's READY result and the task stored for it, in the order of the calls."""
    sends: list[tuple[str, list[NewTask]]]
    """(physical queue, its items): one script call each; a queue that is not partitioned has one."""
    placing: list[list[int]] | None
    """The call indexes of each send, when the queue is partitioned (None: one send, in order)."""

    def outcomes(self, replies: Sequence[Sequence[Enqueued]]) -> list[Enqueued]:
        """The sends' replies as one outcome per call, in the order of the calls."""
        if self.placing is None:
            return list(replies[0]) if replies else []
        out: list[Enqueued | None] = [None] * len(self.prepared)
        for idx, got in zip(self.placing, replies, strict=True):
            for i, outcome in zip(idx, got, strict=True):
                out[i] = outcome
        return [o for o in out if o is not None]

    def results(self, backend: Backend, outcomes: Sequence[Enqueued],
                held: dict[str, tuple[str, dict[str, str]] | None]) -> tuple[list[TaskResult], list[TaskResult]]:
        """Every call's result, and those of the new tasks (to announce with ``task_enqueued``); ``held``: the task hash
        of each holder of an idempotency key an outcome named (``holders``), read by the caller."""
        results, new = [], []
        for (result, _), outcome in zip(self.prepared, outcomes, strict=False):
            if outcome.duplicate_of:
                results.append(duplicate_result(backend, result, outcome.duplicate_of, held[outcome.duplicate_of]))
            else:
                new.append(stored(result, outcome))
                results.append(result)
        return results, new


def holders(outcomes: Sequence[Enqueued]) -> list[str]:
    """The ids of the tasks that hold the idempotency keys of the calls the store refused as duplicates."""
    return [o.duplicate_of for o in outcomes if o.duplicate_of]


def batch(backend: Backend, task: Task, arg_sets: Iterable[tuple[Sequence[Any], dict[str, Any]]],
          span: tracing.Sending | tracing.Noop) -> Batch:
    """Several calls of one task prepared (``prepare``) and placed in the queue's partitions (core/partitions.py)."""
    prepared = [prepare(backend, task, a, k, span.carrier) for a, k in arg_sets]
    items = [item for _, item in prepared]
    span.identify([item.id for item in items])
    queue = task.queue_name
    n = backend.conf.partitions(queue)
    if n == 1:
        return Batch(prepared, [(queue, items)] if items else [], None)
    groups: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(partitions.pick(queue, n, item.idem), []).append(i)
    return Batch(prepared, [(q, [items[i] for i in idx]) for q, idx in groups.items()], list(groups.values()))
