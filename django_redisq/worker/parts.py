"""The worker's parts: what it was asked to be (``WorkerSpec``), how it steers them (``Controls``), and the
components themselves (``Parts``), each built by ``build_parts`` with its collaborators passed by keyword.

No component is given the worker: what it needs of the worker comes as one of
``Controls``' events or callables, so each can be built alone in a test. The
order of ``build_parts`` is the order of the wiring table in
``docs/explanation/architecture.md`` ("How the worker is wired"), which
``tests/worker/test_wiring.py`` holds against these fields.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.crypto import get_random_string

from django_redisq.backend import RedisQueueBackend
from django_redisq.compat import task_backends
from django_redisq.core.options import NAME_RE, WORKER_NAME_MAX, Options
from django_redisq.settings.profiles import parse_weight
from django_redisq.store.broker import Broker
from django_redisq.store.workflows import WorkflowStore
from django_redisq.worker.background.heartbeat import Heartbeat
from django_redisq.worker.background.pump import EventPump
from django_redisq.worker.background.scheduler import Scheduler
from django_redisq.worker.background.upkeep import Upkeep
from django_redisq.worker.fetching.fetcher import Fetcher, Idle
from django_redisq.worker.fetching.handback import HandBack
from django_redisq.worker.fetching.held import Held
from django_redisq.worker.fetching.marks import Marks
from django_redisq.worker.fetching.pausing import Pauses
from django_redisq.worker.fetching.queue_order import QueueOrder
from django_redisq.worker.observability.observer import Observer
from django_redisq.worker.observability.outage import Outage
from django_redisq.worker.observability.tasklog import TaskLog
from django_redisq.worker.pools import Pool, make_pool
from django_redisq.worker.running.runner import Runner
from django_redisq.worker.settling.flows import WorkflowHooks
from django_redisq.worker.settling.hooks import Batch, MetadataHook, SettleHook
from django_redisq.worker.settling.settler import Settler
from django_redisq.worker.settling.steps import SettleSteps
from django_redisq.workflows.engine import WorkflowEngine


def default_name() -> str:
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:60] or "host"
    return f"{host}.{os.getpid()}"


def worker_id(name: str) -> str:
    """The identity of this process: the name plus a per-process incarnation.

    Unique even when a supervisor restarts a worker under a fixed ``--name``:
    the new process never takes over, or undoes the claims of, the tasks its
    dead predecessor held (those count their delivery and come back through
    the reaper), and two live processes given one name do not share a list.
    """
    return f"{name}.{get_random_string(6)}"


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What a worker was asked to be, checked against its backend's settings (``WorkerSpec.of``)."""

    options: Options
    alias: str
    queues: tuple[str, ...]  # logical queues, as asked (a partitioned one is served as its partitions)
    weights: dict[str, int] | None  # weighted order; None: strict
    concurrency: int
    name: str
    id: str
    burst: bool
    max_tasks: int | None
    prefetch: int | None  # fixed prefetch; None: automatic
    pool: str
    max_tasks_per_child: int | None
    max_memory_per_child: int | None
    scheduler: bool
    events: bool

    @classmethod
    def of(cls, queues: Sequence[str] | Mapping[str, int] | None, *, backend: str, concurrency: int, name: str | None,
           burst: bool, max_tasks: int | None, prefetch: int | None, pool: str, max_tasks_per_child: int | None,
           max_memory_per_child: int | None, scheduler: bool | None, events: bool | None) -> WorkerSpec:
        """``Worker``'s arguments, checked: ``ImproperlyConfigured`` for settings that do not fit, ``ValueError`` for
        values that are wrong anywhere."""
        be = task_backends[backend]
        if not isinstance(be, RedisQueueBackend):
            raise ImproperlyConfigured(f"TASKS[{backend!r}] is not a django_redisq RedisQueueBackend.")
        options = be.conf
        served = tuple(queues or options.queues)
        if len(set(served)) != len(served):
            raise ValueError(f"a queue is named twice in {list(served)}")
        for q in served:
            if q not in options.queues:
                raise ImproperlyConfigured(f"queue {q!r} is not in TASKS[{backend!r}]['QUEUES'] {list(options.queues)}.")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        name = name or default_name()
        if not NAME_RE.match(name) or len(name) > WORKER_NAME_MAX:
            raise ValueError(f"worker name {name!r}: use 1-{WORKER_NAME_MAX} letters, digits, '_', '-' or '.'")
        if pool != "processes" and (max_tasks_per_child or max_memory_per_child):
            raise ValueError("max_tasks_per_child and max_memory_per_child apply to the process pool only (--pool processes)")
        weights = {q: parse_weight(w, q) for q, w in queues.items()} if isinstance(queues, Mapping) and queues else None
        # periodic schedules and events: on unless burst (a draining worker would keep enqueuing)
        return cls(options=options, alias=backend, queues=served, weights=weights, concurrency=concurrency, name=name,
                   id=worker_id(name), burst=burst, max_tasks=max_tasks, prefetch=prefetch or options.prefetch or None,
                   pool=pool, max_tasks_per_child=max_tasks_per_child, max_memory_per_child=max_memory_per_child,
                   scheduler=not burst if scheduler is None else scheduler, events=not burst if events is None else events)


@dataclass(frozen=True, slots=True)
class Controls:
    """What the worker gives its parts to be steered by and to report to: its events and its own callables."""

    stop: threading.Event  # stop fetching (warm shutdown)
    force: threading.Event  # stop waiting for running tasks and for Redis
    flush_stop: threading.Event  # the settler's flusher and the marks stop: nothing of ours runs any more
    prefetch: Callable[[], int]  # tasks held per queue
    ahead: Callable[[], int]  # tasks held unstarted beyond the free slots
    info: Callable[[], dict[str, Any]]  # what the heartbeat registers
    fenced: Callable[[str], None]  # we were reaped on a queue
    settled: Callable[[Batch], None]  # a batch was settled: the worker's bookkeeping


@dataclass(slots=True)
class Parts:
    """The worker's components, in the order ``build_parts`` builds them."""

    outage: Outage
    broker: Broker
    runner: Runner
    order: QueueOrder
    held: Held
    pool: Pool
    observer: Observer
    heartbeat: Heartbeat
    pauses: Pauses
    fetcher: Fetcher
    handback: HandBack
    marks: Marks
    settler: Settler
    tasklog: TaskLog
    upkeep: Upkeep
    scheduler: Scheduler | None  # unless burst or scheduler=False
    pump: EventPump | None  # unless burst or events=False


def build_parts(spec: WorkerSpec, controls: Controls, runner: Runner | None = None) -> Parts:
    """Every component of a worker, each with what it needs and nothing of the worker itself."""
    options, wid = spec.options, spec.id
    outage = Outage(worker_id=wid)
    broker = Broker(options=options)
    runner = runner or Runner(options=options, backend_alias=spec.alias)
    partitioned = {q: n for q in spec.queues if (n := options.partitions(q)) > 1}
    order = QueueOrder(queues=spec.queues, weights=spec.weights, partitions=partitioned)
    queues = list(order.queues)  # the physical queues served
    caps = {q: c for q in queues if (c := options.for_queue(q).worker_concurrency)}
    held = Held(queues=queues, limit=controls.prefetch, order=order, caps=caps, slots=spec.concurrency, ahead=controls.ahead)
    pool = make_pool(kind=spec.pool, runner=runner, worker_id=wid, concurrency=spec.concurrency,
                     max_tasks_per_child=spec.max_tasks_per_child, max_memory_per_child=spec.max_memory_per_child)
    observer = Observer(sender=RedisQueueBackend, alias=options.alias, worker_id=wid, pool=pool.name, queues=queues,
                        concurrency=spec.concurrency, worker_timeout=options.worker_timeout, running=held.executing_count,
                        held=held.waiting)
    beats = Broker.for_heartbeat(options)  # its own short-timeout connections
    unsettled: dict[str, str] = {}  # tasks that ran and could not be settled: the settler's, for the heartbeat's sweep
    heartbeat = Heartbeat(broker=beats, options=options, worker_id=wid, queues=queues, info=controls.info, known=held.known,
                          on_fenced=controls.fenced, on_beat=observer.beat, presence=beats.presence.links(queues),
                          unsettled=unsettled, outage=outage)
    idle = Idle.of(queues)
    pauses = Pauses(broker=broker, worker_id=wid, queues=queues, held=held, stop=controls.stop, on_resume=idle.wake)
    fetcher = Fetcher(broker=broker, worker_id=wid, queues=queues, held=held, stop=controls.stop, on_fenced=heartbeat.wake,
                      idle=idle, paused=pauses.current, saw_paused=pauses.saw_paused, burst=spec.burst, outage=outage)
    handback = HandBack(broker=broker, worker_id=wid, held=held, stop=controls.stop, hold_at_most=options.hand_back_after)
    marks = Marks(broker=broker, worker_id=wid, queues=queues, held=held, stop=controls.flush_stop,
                  ttl=options.worker_timeout, refresh=options.heartbeat_interval)
    steps = SettleSteps(force=controls.force, outage=outage)
    settler = Settler(broker=broker, worker_id=wid, steps=steps, hooks=settle_hooks(broker, wid, steps, observer),
                      on_settled=controls.settled, unsettled=unsettled)
    tasklog = TaskLog()
    upkeep = Upkeep(broker=broker, worker_id=wid, queues=queues, held=held, pool=pool, stop=controls.stop,
                    reap_every=options.heartbeat_interval, burst=spec.burst, on_recovered=observer.recovered,
                    paused=pauses.current, tick=tasklog.tick, by_connection=True, outage=outage)
    scheduler = Scheduler(options=options, broker=broker, stop=controls.stop) if spec.scheduler else None
    pump = EventPump(options=options, broker=broker, stop=controls.stop, consumer=wid, queues=list(spec.queues),
                     outage=outage) if spec.events else None
    return Parts(outage=outage, broker=broker, runner=runner, order=order, held=held, pool=pool, observer=observer, heartbeat=heartbeat,
                 pauses=pauses, fetcher=fetcher, handback=handback, marks=marks, settler=settler, tasklog=tasklog,
                 upkeep=upkeep, scheduler=scheduler, pump=pump)


def settle_hooks(broker: Broker, worker_id: str, steps: SettleSteps, observer: Observer) -> list[SettleHook]:
    """The settler's hooks, in the order it calls them: saved metadata, workflow steps, the observer."""
    return [MetadataHook(broker=broker, worker_id=worker_id, steps=steps),
            WorkflowHooks(engine=WorkflowEngine(WorkflowStore(broker)), steps=steps),
            observer]
