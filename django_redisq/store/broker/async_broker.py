"""Native async: the ``Broker`` steps of ``aenqueue`` and ``aget_result`` on the running event loop.

Django's ``BaseTaskBackend`` makes the ``a``-methods ``sync_to_async`` wrappers:
every call from an ASGI view hops to the one thread-sensitive executor thread and
back, so concurrent views queue behind each other there. Here they speak
Redis on the caller's own loop (``connection/async_pools.py``, ``connection/async_wire.py``) and send what the
sync path sends: the KEYS and ARGV of enqueue.lua and the HGETALLs of
``get_task`` come from ``Broker.enqueue_call`` / ``Broker.task_hashes``, their
replies are read by ``Broker.enqueued`` / ``Broker.found_task`` (and the result
by ``backend.build_result``), so both paths give the same results, and an
argument added to a script changes one place.

The common enqueue without a script (store/broker/plain.py) goes the same way
here: a fresh plain task's ``HSET`` and the ``LPUSH`` back to back on the
loop's own socket (``AsyncWire.execute_pinned``: never sent again after a
loss), enqueue_again.lua when their outcome is unknown, and the broker's
``Clock`` for the enqueue time. A wire with no socket of its own (a Cluster's
or Sentinel's routing client) and ``DURABLE_REPLICAS`` keep enqueue.lua.

Group commit. enqueue.lua stores any number of tasks in one atomic call, item
after item, as ``enqueue_many`` does. An ``aenqueue`` on a queue with no enqueue
in flight on this loop is sent at once, so a lone call waits for nothing; the
calls that arrive while one is in flight (many requests on one ASGI worker)
wait for it and then go together in one script call. Each call still gets its
own result: its own id, the duplicate answer for an idempotency key held by an
earlier item, the error of the round trip it went in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from django_redisq.compat import LOOP_SAFE_RECEIVERS, TaskResult, task_enqueued
from django_redisq.connection.async_pools import LoopPools
from django_redisq.connection.async_wire import AsyncWire
from django_redisq.store.broker.broker import Broker
from django_redisq.store.broker.plain import plain, plain_commands
from django_redisq.store.scripts.async_runner import AsyncScriptRunner
from django_redisq.store.scripts.durable import refused
from django_redisq.store.scripts.runner import on_wire
from django_redisq.store.steps.replies import Enqueued, NewTask

BATCH_ITEMS = 500
"""At most this many waiting tasks go in one group commit (more wait for the next)."""
BATCH_BYTES = 4 << 20
"""And at most about this many bytes of messages (a single call's own tasks are never split)."""


_Waiting = tuple[Sequence[NewTask], "asyncio.Future[list[Enqueued]]", bool]
"""A call waiting for the next round trip: its tasks, its caller's future, whether their ids are fresh (plain.py)."""


@dataclass
class _Batch:
    """The enqueues of one loop to one queue: whether one is in flight, and who waits to go next."""

    busy: bool = False
    waiting: list[_Waiting] = field(default_factory=list)
    flushes: set[asyncio.Task[None]] = field(default_factory=set)  # the loop keeps only weak references


class AsyncBroker:
    """The async twin of the ``Broker`` steps a web request needs: enqueue and the task read.

    It holds the backend's sync ``Broker`` (which holds no connection) for the
    keys, the scripts' arguments and the reading of replies, and an
    ``AsyncScriptRunner`` (``scripts``) for the asyncio round trip. Cheap to
    build, like a backend: all state is per loop.
    """

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.options = broker.options
        self.scripts = AsyncScriptRunner(broker.options)
        self._batch_keys: dict[str, tuple[str, ...]] = {}

    async def _enqueue_now(self, queue: str, items: Sequence[NewTask], wire: AsyncWire, fresh: bool) -> list[Enqueued]:
        if fresh and not self.options.durable_replicas and wire.takes_socket and all(plain(item) for item in items):
            done = await self._enqueue_plain(queue, items, wire)
            if done is not None:
                return done
        keys, argv = self.broker.enqueue_call(queue, items)
        if self.options.durable_replicas:
            return await self._enqueue_durable(queue, items, keys, argv, wire)
        return self.broker.enqueued(items, await self.scripts.run("enqueue", keys, argv, wire))

    async def _enqueue_plain(self, queue: str, items: Sequence[NewTask], wire: AsyncWire) -> list[Enqueued] | None:
        """``PlainEnqueue.enqueue`` on the loop; None where the wire turned out to have no socket of its own."""
        k = self.broker.keys(queue)
        now = await self.broker.clock.anow_ms(lambda: self._redis_ms(wire))
        try:
            replies: list[Any] | None = await wire.execute_pinned(*plain_commands(k, items, now))
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:  # sent or not: enqueue_again.lua finds out
            replies = [exc]
        if replies is None:
            return None
        if any(isinstance(reply, BaseException) for reply in replies):
            keys, argv = self.broker.enqueue_call(queue, items)
            now = int((await self.scripts.run("enqueue_again", keys, argv, wire))[0])
        return [Enqueued(item.id, None, now) for item in items]

    @staticmethod
    async def _redis_ms(wire: AsyncWire) -> int:
        seconds, micros = await wire.execute("TIME")
        return int(seconds) * 1000 + int(micros) // 1000

    async def _enqueue_durable(self, queue: str, items: Sequence[NewTask], keys: Sequence[Any], argv: Sequence[Any], wire: AsyncWire) -> list[Enqueued]:
        """DURABLE_REPLICAS: enqueue.lua then WAIT back to back on the wire's socket (store/scripts/durable.py).

        Where the wire has no socket of its own (a cluster's or sentinel's routing
        client) the sync step runs in a thread: it holds one connection of the
        master's (or the slot's node's) pool for both, which redis.asyncio's
        clients cannot promise (a cluster sends WAIT to every primary).
        """
        replies = await self.scripts.run_then_wait("enqueue", keys, argv, wire)
        if replies is None:
            return await asyncio.to_thread(self.broker.enqueue, queue, items)
        reply, acked = replies
        for part in (reply, acked):
            if isinstance(part, BaseException):
                raise part
        if int(acked) < self.options.durable_replicas:
            ids = [item.id for item in items]
            what = f"enqueue of task {ids[0]}" if len(ids) == 1 else f"enqueue of {len(ids)} tasks"
            raise refused(self.options, int(acked), what, ids)
        return self.broker.enqueued(items, reply)

    async def enqueue(self, queue: str, items: Sequence[NewTask], *, fresh: bool = False) -> list[Enqueued]:
        """``Broker.enqueue``, awaited: the same script, arguments and reading of its reply (see Group commit);
        ``fresh``: their ids were generated for this call, so plain ones go without a script (store/broker/plain.py)."""
        wire, pools = await self.scripts.wire()
        batch = self._batch(pools, queue)
        if batch.busy:
            waiter: asyncio.Future[list[Enqueued]] = asyncio.get_running_loop().create_future()
            batch.waiting.append((items, waiter, fresh))
            return await waiter
        batch.busy = True
        try:
            return await self._enqueue_now(queue, items, wire, fresh)
        finally:
            self._next(batch, queue, wire)

    def _batch(self, pools: LoopPools, queue: str) -> _Batch:
        key = self._batch_keys.get(queue)
        if key is None:
            k = self.broker.keys(queue)
            key = self._batch_keys[queue] = ("enqueue", k.pending, k.scheduled, k.prefix)  # one script call serves exactly these
        found = pools.state.get(key)
        if found is None:
            found = pools.state[key] = _Batch()
        return found

    def _next(self, batch: _Batch, queue: str, wire: AsyncWire) -> None:
        """After a round trip: send everything that waited meanwhile (up to the limits) as one, or go idle."""
        if not batch.waiting:
            batch.busy = False
            return
        live = [entry for entry in batch.waiting if not entry[1].done()]  # a cancelled caller's tasks are not sent
        if not live:
            batch.waiting.clear()
            batch.busy = False
            return
        take, count, size = 0, 0, 0
        for items, _, _ in live:
            if take and (count + len(items) > BATCH_ITEMS or size > BATCH_BYTES):
                break
            take, count, size = take + 1, count + len(items), size + sum(len(i.message) for i in items)
        group, batch.waiting = live[:take], live[take:]
        flush = asyncio.get_running_loop().create_task(self._flush(batch, queue, group, wire))
        batch.flushes.add(flush)
        flush.add_done_callback(batch.flushes.discard)

    async def _flush(self, batch: _Batch, queue: str, group: list[_Waiting], wire: AsyncWire) -> None:
        try:
            out = await self._enqueue_now(queue, [item for items, _, _ in group for item in items], wire,
                                          all(fresh for _, _, fresh in group))
        except asyncio.CancelledError:
            for _, waiter, _ in group:
                waiter.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - not swallowed: each call that went in the round trip raises it
            for _, waiter, _ in group:
                if not waiter.done():
                    waiter.set_exception(exc)
        else:
            at = 0
            for items, waiter, _ in group:
                if not waiter.done():
                    waiter.set_result(out[at : at + len(items)])
                at += len(items)
        finally:
            self._next(batch, queue, wire)

    async def get_task(self, task_id: str, queues: Sequence[str]) -> tuple[str, dict[str, str]] | None:
        """``Broker.get_task``, awaited: one HGETALL per queue, all in one round trip."""
        wire, _ = await self.scripts.wire()
        queues = self.broker.options.physical_all(queues)
        hashes = self.broker.task_hashes(task_id, queues)
        return self.broker.found_task(queues, await wire.hgetall_many([on_wire(key) for key in hashes]))


async def send_enqueued(sender: type[Any], result: TaskResult) -> None:
    """Send ``task_enqueued`` for ``result`` as ``Signal.asend`` would, without its thread when none is needed.

    ``asend`` runs every sync receiver through ``sync_to_async``, and the framework
    always has one (its debug log line), so it would cost each ``aenqueue`` a
    thread hop. That receiver, and any listed in ``compat.LOOP_SAFE_RECEIVERS``,
    only log: they are called right here on the loop. A sync receiver of your own
    (which may use the ORM) makes this ``asend`` exactly, thread and all.
    """
    sync, asynchronous = task_enqueued._live_receivers(sender)  # Django >= 5.0: (sync, async)
    if any(receiver not in LOOP_SAFE_RECEIVERS for receiver in sync):
        await task_enqueued.asend(sender, task_result=result)
        return
    for receiver in sync:
        receiver(signal=task_enqueued, sender=sender, task_result=result)
    if asynchronous:
        await asyncio.gather(*(receiver(signal=task_enqueued, sender=sender, task_result=result) for receiver in asynchronous))
