"""The only code that talks to Redis about tasks: one method per atomic step.

Each method runs one Lua script (or one plain command) and turns its integer
codes into return values or exceptions from ``exceptions.py``. Policy (when to
retry, how long to wait) is decided by the caller; atomicity lives here.

This module holds the task's own life: enqueue, fetch, settle, promote, reap,
heartbeat and reading. The other step families are objects the broker holds,
each built with the same ``ScriptRunner`` (store/scripts/runner.py):
``broker.operator`` (replay, purge, cancel, moves, pausing a queue:
store/steps/operator.py), ``broker.schedules`` (store/steps/schedules.py),
``broker.presence`` (store/steps/presence.py), ``broker.running``
(store/steps/running.py), ``broker.progress`` (store/steps/progress.py) and ``broker.durable``
(store/steps/durable.py).
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import Any, Literal, cast

import redis

from django_redisq.connection.clients import BLOCK_TIMEOUT, get_client
from django_redisq.connection.wire import own_wire
from django_redisq.core.limits import rate_spec
from django_redisq.core.options import Options
from django_redisq.exceptions import Fenced, LeaseLost, NotDurable, QueuePaused
from django_redisq.store.broker.plain import Clock, PlainEnqueue, plain
from django_redisq.store.keys import QueueKeys
from django_redisq.store.reads.durations import MAX_NAMES, TTL_MS, triples
from django_redisq.store.scripts.durable import settled
from django_redisq.store.scripts.runner import ScriptRunner, ms
from django_redisq.store.steps import reaping
from django_redisq.store.steps.durable import DurableSteps
from django_redisq.store.steps.operator import OperatorSteps
from django_redisq.store.steps.presence import PresenceSteps
from django_redisq.store.steps.progress import ProgressSteps
from django_redisq.store.steps.replies import Delivery, Enqueued, NewTask, Promoted, Reaped, deliveries
from django_redisq.store.steps.running import RunningMarks
from django_redisq.store.steps.schedules import ScheduleSteps


def _freeing(k: QueueKeys) -> list[str]:
    """The keys a settle step needs to free a task's fleet-wide slots and wake a waiter (lib/limits.lua)."""
    return [k.pending, k.prioritized, k.prioseq, k.slots, k.blocked]


def _aside_ms(o: Options) -> int:
    """How long a task key of the wrong type, set aside as ``<key>:corrupt``, is kept (0: the scripts' default)."""
    return int(o.dead_letter_ttl * 1000)


class Broker:
    """Queue operations for one backend's options. Cheap to build; holds no connection until its first step.

    It runs a task's own life itself and holds the other step families, all on one ``ScriptRunner``
    (``scripts``): ``operator``, ``schedules``, ``presence``, ``running`` and ``progress``.
    """

    def __init__(self, options: Options, client: redis.Redis | None = None) -> None:
        self.options = options
        self.scripts = ScriptRunner(options, client)
        self.operator = OperatorSteps(self.scripts)
        self.schedules = ScheduleSteps(self.scripts)
        self.presence = PresenceSteps(self.scripts)
        self.running = RunningMarks(self.scripts)
        self.progress = ProgressSteps(self.scripts)
        self.durable = DurableSteps(self.scripts)
        self._plain: PlainEnqueue | Literal[False] | None = None  # made on the first plain enqueue (False: none for this client)
        self.clock = Clock(self.scripts.now_ms)  # the Redis clock of plain enqueues, blocking and awaited (store/broker/plain.py)

    @classmethod
    def for_heartbeat(cls, options: Options) -> Broker:
        """A broker on the heartbeat's own connections: timeouts short enough that a beat's round trip fits the lease
        (``connection.heartbeat_budget``), no retries, so a slow Redis shows as a failed beat, never as a late one."""
        return cls(options, get_client(options, "heartbeat"))

    @property
    def client(self) -> redis.Redis:
        return self.scripts.client

    def keys(self, queue: str) -> QueueKeys:
        return self.scripts.keys(queue)

    # -- producing -------------------------------------------------------

    def enqueue(self, queue: str, items: Sequence[NewTask], *, fresh: bool = False) -> list[Enqueued]:
        """Store ``items`` in one round trip, one ``Enqueued`` each (in their order).

        ``fresh``: their ids were generated for this call (no earlier try can have stored them), so plain ones go
        without a script (store/broker/plain.py)."""
        if fresh and items and all(plain(item) for item in items):
            if self._plain is None:
                self._plain = self._plain_enqueue()
            if self._plain is not False:
                return self._plain.enqueue(self.keys(queue), items)
        keys, argv = self.enqueue_call(queue, items)
        try:
            reply = self.scripts.run("enqueue", keys=keys, args=argv)
        except NotDurable as exc:  # DURABLE_REPLICAS: stored on the master, not (yet) on enough replicas
            exc.task_ids = [item.id for item in items]
            raise
        return self.enqueued(items, reply)

    def _plain_enqueue(self) -> PlainEnqueue | Literal[False]:
        """The plain enqueue of this broker's client, or False where it has none (module docstring of plain.py)."""
        wire = own_wire(self.client)
        if wire is None or self.options.durable_replicas:
            return False
        return PlainEnqueue(wire, self.clock, self._enqueue_again)

    def _enqueue_again(self, k: QueueKeys, items: Sequence[NewTask]) -> int:
        """enqueue_again.lua on ``items`` (a plain enqueue's outcome unknown); the Redis time it stored them at."""
        keys, argv = self.enqueue_call(k.queue, items)
        return int(self.scripts.run("enqueue_again", keys=keys, args=argv)[0])

    def enqueue_call(self, queue: str, items: Sequence[NewTask]) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of enqueue.lua for ``items``: the one place that spells them (store/broker/async_broker.py sends the same)."""
        k = self.keys(queue)
        argv: list[Any] = [k.prefix, len(items)]
        for item in items:
            argv.extend(item)  # a NewTask: enqueue.lua's ARGV of one task, in its order
        return [k.pending, k.scheduled, k.prioritized, k.prioseq], argv

    @staticmethod
    def enqueued(items: Sequence[NewTask], reply: Sequence[Any]) -> list[Enqueued]:
        """enqueue.lua's reply for ``items`` as one ``Enqueued`` each (for the sync and the async call alike)."""
        now, *out = reply
        # '!' means the id exists: only our own earlier try (a retried lost reply) can make it
        return [Enqueued(item.id, None if code in ("", "!") else code, int(now)) for item, code in zip(items, out, strict=False)]

    # -- consuming -------------------------------------------------------

    def fetch(self, queue: str, worker: str, count: int, moved_id: str = "", lease: float | None = None) -> list[Delivery]:
        """Claim up to ``count`` pending tasks (plus ``moved_id``, already moved by BLMOVE).

        Raises ``Fenced`` when the worker is not registered on the queue (it was
        reaped): it must drop what it holds and heartbeat again before fetching.
        Raises ``QueuePaused`` while the queue is paused (``moved_id`` went back).
        """
        k = self.keys(queue)
        o = self.options.for_queue(queue)
        out = self.scripts.run("fetch",
            keys=[k.pending, k.processing(worker), k.scheduled, k.workers, k.cancels, k.paused, k.prioritized, k.prioseq,
                  k.slots, k.blocked, k.rate, k.limits],
            args=[k.prefix, count, ms(lease or o.worker_timeout), worker, ms(o.result_ttl), moved_id,
                  ms(o.idempotency_ttl), o.max_running, rate_spec(o.rate_limit), "1" if o.fair else ""],
        )
        if len(out) == 1:
            if out[0] == -2:
                raise QueuePaused(f"queue {queue} is paused")
            raise Fenced(f"worker {worker} is not registered on queue {queue}: it was reaped")
        return deliveries(queue, out)

    def wait(self, queue: str, worker: str, timeout: float = BLOCK_TIMEOUT) -> str | None:
        """Block until a task is pending, moving its id into our processing list (BLMOVE)."""
        k = self.keys(queue)
        moved = self.client.blmove(k.pending, k.processing(worker), timeout, "RIGHT", "LEFT")  # type: ignore[arg-type]
        return cast("str | None", moved)

    def ack_many(self, queue: str, worker: str, results: Iterable[tuple[str, str]],
                 runs: Iterable[tuple[str, float]] = (), plain: Container[str] = ()) -> list[str]:
        """Ack tasks ``(id, result JSON)`` in one script call; returns the ids whose lease was lost.

        ``runs`` are ``(task name, seconds)`` of the tasks acked, added in the
        same call to the queue-minute's durations hash (store/reads/durations.py).
        ``plain``: the ids fetch.lua called plain (``Delivery.plain``), whose hash ack.lua writes without reading.
        """
        k = self.keys(queue)
        o = self.options.for_queue(queue)
        times = triples(runs)
        argv: list[Any] = [k.prefix, ms(o.result_ttl), ms(o.idempotency_ttl), _aside_ms(o),
                           MAX_NAMES, TTL_MS, len(times) // 3, *times]
        for task_id, result_json in results:
            argv += (task_id, result_json, "1" if task_id in plain else "")
        return cast("list[str]", settled(lambda: self.scripts.run("ack", keys=[k.processing(worker), k.dead, k.cancels, *_freeing(k)], args=argv), list))

    def retry(self, queue: str, worker: str, task_id: str, delay_ms: int, error: dict[str, Any]) -> bool:
        """Schedule another attempt after ``delay_ms``; False if the task was dead-lettered instead.

        That is when it was cancelled while it ran (reason ``cancelled``: never retried)
        or its task data turned out corrupt (reason ``corrupt``).
        """
        k = self.keys(queue)

        def finish(code: Any) -> bool:
            if code == -1:
                raise LeaseLost(f"task {task_id} was no longer held by worker {worker} at retry")
            return int(code) == 1

        return cast("bool", settled(lambda: self.scripts.run("retry",
            keys=[k.processing(worker), k.scheduled, k.task(task_id), k.status(task_id), k.dead, k.cancels, *_freeing(k)],
            args=[k.prefix, task_id, max(0, int(delay_ms)), json.dumps(error, separators=(",", ":")), worker,
                  _aside_ms(self.options.for_queue(queue))],
        ), finish))

    def bury(self, queue: str, worker: str, task_id: str, error: dict[str, Any], reason: str, failed: bool) -> int:
        """Dead-letter a task (deleting its cancel request); returns how many old dead letters retention removed."""
        k = self.keys(queue)
        o = self.options.for_queue(queue)

        def finish(code: Any) -> int:
            if code == -1:
                raise LeaseLost(f"task {task_id} was no longer held by worker {worker} at bury")
            return int(code)

        return cast("int", settled(lambda: self.scripts.run("bury",
            keys=[k.processing(worker), k.dead, k.task(task_id), k.status(task_id), k.cancels, *_freeing(k)],
            args=[
                k.prefix, task_id, json.dumps(error, separators=(",", ":")), reason,
                int(o.dead_letter_ttl * 1000), o.dead_letter_max, worker, 1 if failed else 0,
                str(error.get("msg", "")), str(error.get("exc", "")),
            ],
        ), finish))

    def release(self, queue: str, worker: str, unstarted: Sequence[str] = (), deliveries: Sequence[int] | None = None,
                *, ran: bool = False) -> int:
        """Hand back unstarted tasks; with none given, everything left, and leave the heartbeat set.

        ``deliveries``: the delivery count each claim had (``Delivery.deliveries``); an id claimed again since
        (counted higher) is left alone. A task with a cancel request is dead-lettered (``cancelled``) instead.
        ``ran``: the tasks ran and could not be settled: their delivery stays counted (no claim is undone).
        Returns how many left the list.
        """
        k = self.keys(queue)
        if ran and unstarted:
            args: list[Any] = [k.prefix, worker, "+", *unstarted]
        elif deliveries is not None and unstarted:
            args = [k.prefix, worker, "", *(x for pair in zip(unstarted, deliveries, strict=True) for x in pair)]
        else:
            args = [k.prefix, worker, *unstarted]
        return int(self.scripts.run("release", keys=[k.processing(worker), k.pending, k.workers, k.alive, k.dead, k.cancels,
                                                          k.prioritized, k.prioseq, k.slots, k.blocked], args=args))

    # -- background duties ----------------------------------------------

    def promote(self, queue: str, batch: int = 1000) -> Promoted:
        """Move due scheduled tasks to pending."""
        k = self.keys(queue)
        moved, wait = self.scripts.run("promote", keys=[k.scheduled, k.pending, k.prioritized, k.prioseq], args=[k.prefix, batch])
        return Promoted(int(moved), int(wait))

    def reap_detail(self, queue: str, reaper: str = "", max_workers: int = 10) -> Reaped:
        """Give back the tasks of workers silent for ``WORKER_TIMEOUT`` (store/steps/reaping.py).

        A worker passes its own id as ``reaper``: it is never reaped by itself,
        and reaps only once its own heartbeats have been fresh and unbroken for
        ``WORKER_TIMEOUT`` (after an outage every heartbeat looks stale). An
        operator's call (no ``reaper``) has no such condition. A task with a cancel
        request is dead-lettered (``cancelled``) instead of given back.
        Workers whose process is known dead by its connection are reaped sooner: ``presence.reap_gone``.
        """
        return reaping.reap(self.scripts, queue, reaper, max_workers)

    def heartbeat_gap_ms(self) -> int:
        """A heartbeat later than this after the previous one means the worker (or Redis) was away (store/steps/reaping.py)."""
        return reaping.heartbeat_gap_ms(self.options)

    def heartbeat(self, queues: Iterable[str], worker: str, info: dict[str, Any],
                  presence: Mapping[str, str] | None = None) -> list[str]:
        """Refresh this worker's heartbeat and guard leases on every queue, in one round trip.

        ``presence``: per queue, the entry that proves the worker's process alive there (store/steps/presence.py); a
        queue without one leaves the worker to be reaped by the timeout only. Returns the queues on which the
        worker was not registered before this call (it was reaped there, or this is its first heartbeat).
        """
        presence = presence or {}
        lease = ms(self.options.worker_timeout)
        gap = self.heartbeat_gap_ms()
        text = json.dumps(info, separators=(",", ":"))
        queues = list(queues)
        pipe = self.client.pipeline(transaction=False)
        for q in queues:
            k = self.keys(q)
            self.scripts.run("heartbeat", keys=[k.workers, k.processing(worker), k.alive, k.presence],
                             args=[k.prefix, worker, lease, text, gap, presence.get(q, "")], pipe=pipe)
        return [q for q, (_, registered) in zip(queues, pipe.execute(), strict=True) if not registered]

    def nothing_left(self, queues: Iterable[str], worker: str, skip_waiting: Iterable[str] = ()) -> bool:
        """Whether ``queues`` hold nothing for ``worker``: no task waiting (but in ``skip_waiting``) and none in its
        processing list. One pipelined round trip; a wake-up marker counts as waiting (the next fetch drops it)."""
        skip = set(skip_waiting)
        pipe = self.client.pipeline(transaction=False)
        for q in queues:
            k = self.keys(q)
            if q not in skip:
                pipe.llen(k.pending)
                pipe.zcard(k.prioritized)
                if self.options.for_queue(q).fair:
                    pipe.llen(k.fair)
            pipe.llen(k.processing(worker))
        return not any(pipe.execute())

    def processing_ids(self, queue: str, worker: str) -> list[str]:
        return cast("list[str]", self.client.lrange(self.keys(queue).processing(worker), 0, -1))

    # -- reading ---------------------------------------------------------

    def get_task(self, task_id: str, queues: Iterable[str]) -> tuple[str, dict[str, str]] | None:
        """The task hash of ``task_id`` and its (physical) queue, looking in every partition of each queue given."""
        queues = self.options.physical_all(queues)
        pipe = self.client.pipeline(transaction=False)
        for key in self.task_hashes(task_id, queues):
            pipe.hgetall(key)
        return self.found_task(queues, pipe.execute())

    def task_hashes(self, task_id: str, queues: Sequence[str]) -> list[str]:
        """The keys ``get_task`` reads (one HGETALL each, in one round trip), in the order of ``queues``."""
        return [self.keys(q).task(task_id) for q in queues]

    @staticmethod
    def found_task(queues: Sequence[str], replies: Sequence[Any]) -> tuple[str, dict[str, str]] | None:
        """The first queue whose task hash is not empty, and that hash, from the HGETALL replies (sync or async)."""
        for q, data in zip(queues, replies, strict=False):
            if data:
                return q, data
        return None

    def save_metadata(self, queue: str, task_id: str, metadata_json: str) -> bool:
        """Replace a task's metadata; False when the task no longer exists (nothing written)."""
        k = self.keys(queue)
        return bool(self.scripts.run("save_metadata", keys=[k.task(task_id), k.status(task_id)], args=[metadata_json, ""]))

    def save_metadata_held(self, queue: str, worker: str, items: Sequence[tuple[str, str]]) -> list[str]:
        """Save ``(id, metadata JSON)`` of tasks ``worker`` ran, in one round trip; the ids it no longer held.

        Each is written only while the task's guard still names the worker, so
        a reaped worker never overwrites what the copy running elsewhere saves.
        """
        k = self.keys(queue)
        pipe = self.client.pipeline(transaction=False)
        for task_id, metadata_json in items:
            self.scripts.run("save_metadata", keys=[k.task(task_id), k.status(task_id)], args=[metadata_json, f"running:{worker}"],
                             pipe=pipe)
        return [task_id for (task_id, _), saved in zip(items, pipe.execute(), strict=False) if not saved]

    def server_time_ms(self) -> int:
        return self.scripts.now_ms()
