"""The only code that talks to Redis about tasks: one method per atomic step.

Each method runs one Lua script (or one plain command) and turns its integer
codes into return values or exceptions from ``exceptions.py``. Policy (when to
retry, how long to wait) is decided by the caller; atomicity lives here.

This module holds the task's own life: enqueue, fetch, settle, promote, reap,
heartbeat and reading. The operator's steps (replay, purge, cancel, moves,
pausing a queue) are in store/operator_steps.py and the periodic schedules' in
store/schedule_steps.py; ``Broker`` is all three.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from django_redisq.connection.clients import BLOCK_TIMEOUT, get_client
from django_redisq.connection.wire import wire_for
from django_redisq.core.limits import rate_spec
from django_redisq.core.options import Options
from django_redisq.exceptions import Fenced, LeaseLost, NotDurable, QueuePaused
from django_redisq.store import scripts
from django_redisq.store.durable import STEPS as DURABLE_STEPS
from django_redisq.store.durable import call as durable_call
from django_redisq.store.durable import settled as _settled
from django_redisq.store.durable import what as _what
from django_redisq.store.durations import MAX_NAMES, TTL_MS, triples
from django_redisq.store.keys import QueueKeys
from django_redisq.store.operator_steps import OperatorSteps
from django_redisq.store.presence import PresenceSteps
from django_redisq.store.progress_steps import ProgressSteps
from django_redisq.store.replies import (
    DEFAULTS,
    Delivery,
    Enqueued,
    NewTask,
    Recovered,
    delivery,
)
from django_redisq.store.running_marks import RunningMarks
from django_redisq.store.schedule_steps import ScheduleSteps


def _wire(value: Any) -> Any:
    """Text as Redis should get it: garbage ids and error texts may hold lone surrogates
    (undecodable bytes read back with 'surrogateescape'); send those as the original bytes."""
    if value.__class__ is str and not value.isascii():
        return value.encode("utf-8", "surrogateescape")
    return value


class Broker(OperatorSteps, ScheduleSteps, PresenceSteps, RunningMarks, ProgressSteps):
    """Queue operations for one backend's options. Cheap to build; holds no connection."""

    def __init__(self, options: Options, client: redis.Redis | None = None) -> None:
        self.options = options
        self._client = client
        self._keys: dict[str, QueueKeys] = {}
        self._scripts: dict[str, Callable[..., Any]] = {}

    @classmethod
    def for_heartbeat(cls, options: Options) -> Broker:
        """A broker on the heartbeat's own connections: timeouts short enough that a beat's round trip fits the lease
        (``connection.heartbeat_budget``), no retries, so a slow Redis shows as a failed beat, never as a late one."""
        return cls(options, get_client(options, "heartbeat"))

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = get_client(self.options)
        return self._client

    def keys(self, queue: str) -> QueueKeys:
        k = self._keys.get(queue)
        if k is None:
            k = self._keys[queue] = QueueKeys(queue, self.options.key_prefix)
        return k

    def _script(self, name: str) -> Callable[..., Any]:
        call = self._scripts.get(name)
        if call is None:
            script = self.client.register_script(scripts.source(name))
            execute = wire_for(self.client)  # connection/wire.py: without execute_command's per-call wrappers
            durable_step = bool(self.options.durable_replicas) and name in DURABLE_STEPS

            def call(keys: Sequence[Any], args: Sequence[Any], client: Any = None, _script: Script = script) -> Any:
                keys, args = [_wire(k) for k in keys], [_wire(a) for a in args]
                if durable_step:  # DURABLE_REPLICAS: the script then WAIT on one held connection (store/durable.py)
                    return durable_call(self.client, self.options, _script.sha, scripts.source(name), keys, args,
                                        lambda: _what(name, keys, args), settle=name != "enqueue")
                if client is not None:  # a pipeline: redis-py loads missing scripts before executing it
                    return _script(keys=keys, args=args, client=client)
                try:  # EVALSHA directly: the hot path, without Script.__call__'s wrappers
                    return execute("EVALSHA", _script.sha, len(keys), *keys, *args)
                except NoScriptError:  # the server restarted or SCRIPT FLUSH: load it again
                    self.client.script_load(_script.script)
                    return execute("EVALSHA", _script.sha, len(keys), *keys, *args)

            self._scripts[name] = call
        return call

    @staticmethod
    def _freeing(k: QueueKeys) -> list[str]:
        """The keys a settle step needs to free a task's fleet-wide slots and wake a waiter (lib/limits.lua)."""
        return [k.pending, k.prioritized, k.prioseq, k.slots, k.blocked]

    def _ms(self, seconds: float) -> int:
        return max(1, int(seconds * 1000))

    def _aside_ms(self, o: Options) -> int:
        """How long a task key of the wrong type, set aside as ``<key>:corrupt``, is kept (0: the scripts' default)."""
        return int(o.dead_letter_ttl * 1000)

    # -- producing -------------------------------------------------------

    def enqueue(self, queue: str, items: Sequence[NewTask]) -> list[Enqueued]:
        """Store tasks ``(id, message, task path, delay ms, idempotency key[, priority])`` in one round trip."""
        keys, argv = self.enqueue_call(queue, items)
        try:
            reply = self._script("enqueue")(keys=keys, args=argv)
        except NotDurable as exc:  # DURABLE_REPLICAS: stored on the master, not (yet) on enough replicas
            exc.task_ids = [item[0] for item in items]
            raise
        return self.enqueued(items, reply)

    def enqueue_call(self, queue: str, items: Sequence[NewTask]) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of enqueue.lua for ``items``: the one place that spells them (store/async_broker.py sends the same)."""
        k = self.keys(queue)
        argv: list[Any] = [k.prefix, len(items)]
        for item in items:
            argv.extend(item)
            argv.extend(DEFAULTS[len(item) - 5 :])  # the default priority, no limits
        return [k.pending, k.scheduled, k.prioritized, k.prioseq], argv

    @staticmethod
    def enqueued(items: Sequence[NewTask], reply: Sequence[Any]) -> list[Enqueued]:
        """enqueue.lua's reply for ``items`` as one ``Enqueued`` each (for the sync and the async call alike)."""
        now, *out = reply
        # '!' means the id exists: only our own earlier try (a retried lost reply) can make it
        return [Enqueued(item[0], None if code in ("", "!") else code, int(now)) for item, code in zip(items, out, strict=False)]

    # -- consuming -------------------------------------------------------

    def fetch(self, queue: str, worker: str, count: int, moved_id: str = "", lease: float | None = None) -> list[Delivery]:
        """Claim up to ``count`` pending tasks (plus ``moved_id``, already moved by BLMOVE).

        Raises ``Fenced`` when the worker is not registered on the queue (it was
        reaped): it must drop what it holds and heartbeat again before fetching.
        Raises ``QueuePaused`` while the queue is paused (``moved_id`` went back).
        """
        k = self.keys(queue)
        o = self.options.for_queue(queue)
        out = self._script("fetch")(
            keys=[k.pending, k.processing(worker), k.scheduled, k.workers, k.cancels, k.paused, k.prioritized, k.prioseq,
                  k.slots, k.blocked, k.rate, k.limits],
            args=[k.prefix, count, self._ms(lease or o.worker_timeout), worker, self._ms(o.result_ttl), moved_id,
                  self._ms(o.idempotency_ttl), o.max_running, rate_spec(o.rate_limit)],
        )
        if len(out) == 1:
            if out[0] == -2:
                raise QueuePaused(f"queue {queue} is paused")
            raise Fenced(f"worker {worker} is not registered on queue {queue}: it was reaped")
        return [delivery(queue, out[i : i + 10]) for i in range(0, len(out), 10)]

    def wait(self, queue: str, worker: str, timeout: float = BLOCK_TIMEOUT) -> str | None:
        """Block until a task is pending, moving its id into our processing list (BLMOVE)."""
        k = self.keys(queue)
        moved = self.client.blmove(k.pending, k.processing(worker), timeout, "RIGHT", "LEFT")  # type: ignore[arg-type]
        return cast("str | None", moved)

    def ack(self, queue: str, worker: str, task_id: str, result_json: str) -> None:
        if self.ack_many(queue, worker, [(task_id, result_json)]):
            raise LeaseLost(f"task {task_id} was no longer held by worker {worker} at ack")

    def ack_many(self, queue: str, worker: str, results: Iterable[tuple[str, str]],
                 runs: Iterable[tuple[str, float]] = ()) -> list[str]:
        """Ack tasks ``(id, result JSON)`` in one script call; returns the ids whose lease was lost.

        ``runs`` are ``(task name, seconds)`` of the tasks acked, added in the
        same call to the queue-minute's durations hash (store/durations.py).
        """
        k = self.keys(queue)
        o = self.options.for_queue(queue)
        times = triples(runs)
        argv: list[Any] = [k.prefix, self._ms(o.result_ttl), self._ms(o.idempotency_ttl), self._aside_ms(o),
                           MAX_NAMES, TTL_MS, len(times) // 3, *times]
        for task_id, result_json in results:
            argv += (task_id, result_json)
        script = self._script("ack")
        return cast("list[str]", _settled(lambda: script(keys=[k.processing(worker), k.dead, k.cancels, *self._freeing(k)], args=argv), list))

    def retry(self, queue: str, worker: str, task_id: str, delay_ms: int, error: dict[str, Any]) -> bool:
        """Schedule another attempt after ``delay_ms``; False if the task was dead-lettered instead.

        That is when it was cancelled while it ran (reason ``cancelled``: never retried)
        or its task data turned out corrupt (reason ``corrupt``).
        """
        k = self.keys(queue)
        script = self._script("retry")

        def finish(code: Any) -> bool:
            if code == -1:
                raise LeaseLost(f"task {task_id} was no longer held by worker {worker} at retry")
            return int(code) == 1

        return cast("bool", _settled(lambda: script(
            keys=[k.processing(worker), k.scheduled, k.task(task_id), k.status(task_id), k.dead, k.cancels, *self._freeing(k)],
            args=[k.prefix, task_id, max(0, int(delay_ms)), json.dumps(error, separators=(",", ":")), worker,
                  self._aside_ms(self.options.for_queue(queue))],
        ), finish))

    def bury(self, queue: str, worker: str, task_id: str, error: dict[str, Any], reason: str, failed: bool) -> int:
        """Dead-letter a task (deleting its cancel request); returns how many old dead letters retention removed."""
        k = self.keys(queue)
        o = self.options.for_queue(queue)
        script = self._script("bury")

        def finish(code: Any) -> int:
            if code == -1:
                raise LeaseLost(f"task {task_id} was no longer held by worker {worker} at bury")
            return int(code)

        return cast("int", _settled(lambda: script(
            keys=[k.processing(worker), k.dead, k.task(task_id), k.status(task_id), k.cancels, *self._freeing(k)],
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
        return int(self._script("release")(keys=[k.processing(worker), k.pending, k.workers, k.alive, k.dead, k.cancels,
                                                          k.prioritized, k.prioseq, k.slots, k.blocked], args=args))

    # -- background duties ----------------------------------------------

    def promote(self, queue: str, batch: int = 1000) -> tuple[int, int]:
        """Move due scheduled tasks to pending: (moved, ms until the next one or -1)."""
        k = self.keys(queue)
        moved, wait = self._script("promote")(keys=[k.scheduled, k.pending, k.prioritized, k.prioseq], args=[k.prefix, batch])
        return int(moved), int(wait)

    def reap(self, queue: str, reaper: str = "", max_workers: int = 10) -> tuple[int, list[str]]:
        """Give back the tasks of workers silent for ``WORKER_TIMEOUT``: (tasks, workers); see ``reap_detail``."""
        tasks, workers, _ = self.reap_detail(queue, reaper, max_workers)
        return tasks, workers

    def reap_detail(self, queue: str, reaper: str = "", max_workers: int = 10) -> tuple[int, list[str], list[Recovered]]:
        """Give back the tasks of workers silent for ``WORKER_TIMEOUT``: (tasks, workers, what was given back).

        A worker passes its own id as ``reaper``: it is never reaped by itself,
        and reaps only once its own heartbeats have been fresh and unbroken for
        ``WORKER_TIMEOUT`` (after an outage every heartbeat looks stale). An
        operator's call (no ``reaper``) has no such condition. A task with a cancel
        request is dead-lettered (``cancelled``) instead of given back.
        Workers whose process is known dead by its connection are reaped sooner: ``reap_gone`` (store/presence.py).
        """
        return self._reap(queue, reaper, max_workers, ())

    def _reap(self, queue: str, reaper: str, max_workers: int, pairs: Sequence[str]) -> tuple[int, list[str], list[Recovered]]:
        """reap.lua by the clock (no ``pairs``) or by connection (``pairs``: worker id, the presence entry seen gone)."""
        k = self.keys(queue)
        out = self._script("reap")(
            keys=[k.workers, k.pending, k.alive, k.dead, k.cancels, k.prioritized, k.prioseq, k.slots, k.blocked, k.presence],
            args=[k.prefix, self._ms(self.options.worker_timeout), max_workers, reaper, self.heartbeat_gap_ms(), *pairs],
        )
        if len(out) == 2 and out[1] == -1:
            return 0, [], []
        back = out[1]
        recovered = [Recovered(back[i], queue, back[i + 1], back[i + 2], int(back[i + 3] or 0)) for i in range(0, len(back), 4)]
        return int(out[0]), list(out[2:]), recovered

    def heartbeat_gap_ms(self) -> int:
        """A heartbeat later than this after the previous one means the worker (or Redis) was away.

        Half of WORKER_TIMEOUT: more than the normal spacing of heartbeats (E016:
        WORKER_TIMEOUT > 2 x HEARTBEAT_INTERVAL), and an outage shorter than it
        cannot make a live worker's last heartbeat older than WORKER_TIMEOUT
        (at most one interval plus the outage).
        """
        return self._ms(self.options.worker_timeout / 2)

    def heartbeat(self, queues: Iterable[str], worker: str, info: dict[str, Any],
                  presence: Mapping[str, str] | None = None) -> list[str]:
        """Refresh this worker's heartbeat and guard leases on every queue, in one round trip.

        ``presence``: per queue, the entry that proves the worker's process alive there (store/presence.py); a
        queue without one leaves the worker to be reaped by the timeout only. Returns the queues on which the
        worker was not registered before this call (it was reaped there, or this is its first heartbeat).
        """
        presence = presence or {}
        script = self._script("heartbeat")
        lease = self._ms(self.options.worker_timeout)
        gap = self.heartbeat_gap_ms()
        text = json.dumps(info, separators=(",", ":"))
        queues = list(queues)
        pipe = self.client.pipeline(transaction=False)
        for q in queues:
            k = self.keys(q)
            script(keys=[k.workers, k.processing(worker), k.alive, k.presence],
                   args=[k.prefix, worker, lease, text, gap, presence.get(q, "")], client=pipe)
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
        return bool(self._script("save_metadata")(keys=[k.task(task_id), k.status(task_id)], args=[metadata_json, ""]))

    def save_metadata_held(self, queue: str, worker: str, items: Sequence[tuple[str, str]]) -> list[str]:
        """Save ``(id, metadata JSON)`` of tasks ``worker`` ran, in one round trip; the ids it no longer held.

        Each is written only while the task's guard still names the worker, so
        a reaped worker never overwrites what the copy running elsewhere saves.
        """
        k = self.keys(queue)
        script = self._script("save_metadata")
        pipe = self.client.pipeline(transaction=False)
        for task_id, metadata_json in items:
            script(keys=[k.task(task_id), k.status(task_id)], args=[metadata_json, f"running:{worker}"], client=pipe)
        return [task_id for (task_id, _), saved in zip(items, pipe.execute(), strict=False) if not saved]

    def server_time_ms(self) -> int:
        sec, usec = self.client.time()
        return int(sec) * 1000 + int(usec) // 1000
