"""The common enqueue without a script: two plain commands where most ``.delay()`` calls need no check.

A task with a generated id, no idempotency key, no delay, the default priority
and no limits of its own asks nothing of Redis that only Lua can answer: no key
to look up, no time to add, no ZSET to rank it in. Its task hash and its push
go as ``HSET`` then ``LPUSH`` (one ``LPUSH`` for a batch), back to back in one
write on a connection of the pool's wire (connection/wire.py). That is what a
queue without a result store sends, plus the hash our results and the admin
read; ``EVALSHA`` of enqueue.lua cost the server about twice as much per task
(bench/run.py ``--only redis-cost``). Everything else still goes through
enqueue.lua.

Why it is safe without a transaction:

* The hash goes first. A worker can only take the id once it is pushed, and by
  then the hash is there (one client's commands run in order). A generated id
  of 192 random bits names no key that exists, so the ``HSET`` cannot meet a
  key of another type.
* When the connection fails, or a reply is an error (the pending LIST of the
  wrong type, memory full), either command may or may not have run. These two
  are never re-sent blindly: a re-sent ``HSET`` could turn a task a fast worker
  already finished back into a pending one. enqueue_again.lua settles it
  instead, on the Redis clock: stored and queued if no hash is there, pushed
  again if it is still pending and never delivered (a copy, if the first push
  ran, is absorbed as every redelivered copy is), left alone once a worker took it.
* The enqueue time is the Redis clock as this process last read it (``Clock``):
  ``TIME`` once a minute, its offset from the local clock kept in between. It
  is a time shown (``enqueued_at``), never one a due time, a lease or a backoff
  is computed from: those are still read inside the scripts (DESIGN invariant 3).

A cluster's or a sentinel's client has no wire of its own (its client routes
each call), nor does ``DURABLE_REPLICAS`` (its WAIT needs the script's
connection): they keep enqueue.lua for every task.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis

from django_redisq.connection.wire import Wire
from django_redisq.store.keys import QueueKeys
from django_redisq.store.scripts.runner import on_wire
from django_redisq.store.steps.replies import Enqueued, NewTask

CLOCK_EVERY = 60.0
"""Seconds between two reads of the Redis clock by one process's plain enqueues."""


def plain(item: NewTask) -> bool:
    """Whether ``item`` needs nothing but a hash and a push (its id generated, which the caller knows)."""
    return item.delay_ms == 0 and not item.idem and item.priority == 0 and not item.limits


class Clock:
    """The Redis server's clock, read with ``TIME`` every ``CLOCK_EVERY`` seconds and carried by the local one between.

    The offset is taken at the end of the round trip: the server read its clock before that, so the carried time is
    never ahead of the server's (a task's ``enqueued_at`` is never after the ``TIME`` of a read or a fetch that follows
    it: no negative age or wait), and behind it by at most the round trip (well under a millisecond on a LAN), plus
    the two clocks' drift over a minute, which readers of ages bound at 0. One per broker, shared by its blocking and
    its awaited enqueues (``now_ms`` reads with ``read``, ``anow_ms`` with the loop's own call)."""

    def __init__(self, read: Callable[[], int]) -> None:
        self._read = read
        self._offset = 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        if time.time() >= self._next:
            with self._lock:
                if time.time() >= self._next:
                    self._learn(self._read(), time.time())
        return int(time.time() * 1000 + self._offset)

    async def anow_ms(self, read: Callable[[], Awaitable[int]]) -> int:
        """``now_ms`` on the running loop: ``read`` awaits the server's ``TIME`` when it is due. No lock (it cannot be held
        across an await): a thread and a loop that find it due together both read ``TIME``, and either reading is right."""
        if time.time() >= self._next:
            self._learn(await read(), time.time())
        return int(time.time() * 1000 + self._offset)

    def _learn(self, redis_ms: int, after: float) -> None:
        self._offset = redis_ms - after * 1000
        self._next = after + CLOCK_EVERY


def plain_commands(k: QueueKeys, items: Sequence[NewTask], now: int) -> list[tuple[Any, ...]]:
    """What a plain enqueue sends, in this order: each task's ``HSET``, then one ``LPUSH`` of their ids."""
    commands: list[tuple[Any, ...]] = [
        ("HSET", k.task(item.id), "msg", on_wire(item.message), "task", item.task, "state", "pending",
         "enqueued_at", now, "deliveries", 0, "failures", 0, "idem", "")
        for item in items]
    commands.append(("LPUSH", k.pending, *[item.id for item in items]))
    return commands


class PlainEnqueue:
    """Stores plain tasks with ``HSET`` + ``LPUSH`` on ``wire``; ``again`` runs enqueue_again.lua for an unknown outcome."""

    def __init__(self, wire: Wire, clock: Clock, again: Callable[[QueueKeys, Sequence[NewTask]], int]) -> None:
        self.wire = wire
        self.clock = clock
        self.again = again

    def enqueue(self, k: QueueKeys, items: Sequence[NewTask]) -> list[Enqueued]:
        now = self.clock.now_ms()
        try:
            replies = self.wire.send_all(plain_commands(k, items, now))
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            replies = None
        if replies is None or any(isinstance(r, Exception) for r in replies):
            now = self.again(k, items)  # raises what Redis still refuses (the caller's door words it)
        return [Enqueued(item.id, None, now) for item in items]
