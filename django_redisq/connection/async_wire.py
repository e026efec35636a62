"""The event loop's wire to Redis: one pipelined socket per loop and Redis, for ``aenqueue`` and ``aget_result``.

Why not the ``redis.asyncio`` client for each call: its per-command path (a pool
checkout under an asyncio lock, a retry wrapper, observability hooks, a
``wait_for`` around each write and a timeout context around each read) cost an
``aenqueue`` more on the loop than the round trip itself, so awaiting
``aenqueue`` one call after another was slower than ``enqueue`` in a thread
(bench/run.py, aenqueue section). So ``redis.asyncio`` still opens the
connection (address, TLS, AUTH, SELECT, client name, timeouts: all as the pool
is configured) and then hands its socket to ``WireProtocol``, a protocol of ours: a
command is packed by hiredis and written at once, and hiredis's reader matches
each reply to its caller in order, so concurrent calls share the one socket
with no lock (pipelining).

Kept from the pool's settings: ``socket_timeout`` for every reply (one timer per
connection, not one per call), the sync pools' retry policy after a lost
connection or a timeout (``connection.retry_policy``), and error replies as
redis-py's exception classes (``NOSCRIPT`` is ``NoScriptError``, ``READONLY``
``ReadOnlyError``...). A Redis Cluster's or Sentinel's client routes each call
itself (to the queue's node; to the master after a failover), so there the wire
is that client's ``execute_command``; so it is where the socket cannot be taken
(another redis-py): slower, the same results.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError, ResponseError, TimeoutError

from django_redisq import connection
from django_redisq.connection import topology

hiredis: Any
try:
    import hiredis
except ImportError:  # pragma: no cover - a dependency of redis[hiredis]
    hiredis = None

try:
    from redis._parsers import BaseParser

    parse_error: Any = BaseParser.parse_error
except ImportError:  # pragma: no cover - an older redis-py
    parse_error = ResponseError


class WireProtocol(asyncio.Protocol):
    """One connection's commands and replies: written at once, matched in order, failed together when it is lost."""

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float | None, where: str) -> None:
        self._loop = loop
        self._timeout = timeout
        self._where = where
        assert hiredis is not None
        self._reader = hiredis.Reader(encoding="utf-8", errors="surrogateescape", replyError=parse_error)
        self._waiting: deque[tuple[asyncio.Future[Any], float]] = deque()  # in the order sent, with when
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._writable: asyncio.Future[None] | None = None  # set while the transport's buffer is full
        self.lost: type[Exception] | None = None
        self.why = ""

    # -- the protocol ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        reader, waiting = self._reader, self._waiting
        reader.feed(data)
        while waiting:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError as exc:  # not Redis speaking: nothing later can be matched either
                self._abort(ConnectionError, f"protocol error from {self._where}: {exc}")
                return
            if reply is False:  # not all of it arrived yet
                return
            future = waiting.popleft()[0]
            if future.done():  # its caller was cancelled; the reply is read all the same
                continue
            if isinstance(reply, ResponseError):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionError, f"Connection to {self._where} lost" + (f": {exc}" if exc else ""))

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None:
            if not self._writable.done():
                self._writable.set_result(None)
            self._writable = None

    # -- calls -------------------------------------------------------------

    async def call(self, args: Sequence[Any]) -> Any:
        """Send one command and wait for its reply (an error reply raises as redis-py's exception class)."""
        if self.lost is not None:
            raise self.lost(self.why)
        assert self._transport is not None
        future = self._loop.create_future()
        self._waiting.append((future, time.monotonic()))
        if self._timer is None and self._timeout:
            self._timer = self._loop.call_later(self._timeout, self._expire)
        self._transport.write(hiredis.pack_command(tuple(args)))
        if self._writable is not None:
            await asyncio.shield(self._writable)
        return await future

    async def call_many(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send commands back to back in one write; their replies in order, an error reply as its exception (returned).

        For a write and the ``WAIT`` that must follow it on the same connection
        (store/scripts/durable.py); a lost connection raises, and nothing is sent again.
        """
        if self.lost is not None:
            raise self.lost(self.why)
        assert self._transport is not None
        now, futures = time.monotonic(), []
        for _ in commands:
            futures.append(future := self._loop.create_future())
            self._waiting.append((future, now))
        if self._timer is None and self._timeout:
            self._timer = self._loop.call_later(self._timeout, self._expire)
        self._transport.write(b"".join(hiredis.pack_command(tuple(args)) for args in commands))
        if self._writable is not None:
            await asyncio.shield(self._writable)
        replies = await asyncio.gather(*futures, return_exceptions=True)
        for reply in replies:
            if isinstance(reply, BaseException) and not isinstance(reply, ResponseError):
                raise reply
        return replies

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # -- failures ----------------------------------------------------------

    def _expire(self) -> None:
        """The one timer: a reply later than ``socket_timeout`` fails the connection, as redis-py's read would."""
        self._timer = None
        if not self._waiting or self._timeout is None:
            return
        late = time.monotonic() - self._waiting[0][1] - self._timeout
        if late >= 0:
            self._abort(TimeoutError, f"Timeout reading from {self._where}")
        else:
            self._timer = self._loop.call_later(-late, self._expire)

    def _abort(self, error: type[Exception], why: str) -> None:
        self._fail(error, why)
        if self._transport is not None:
            self._transport.abort()

    def _fail(self, error: type[Exception], why: str) -> None:
        """Every call still waiting gets ``error``; so does every later call (the AsyncWire opens a new WireProtocol)."""
        if self.lost is None:
            self.lost, self.why = error, why
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiting:
            future = self._waiting.popleft()[0]
            if not future.done():
                future.set_exception(self.lost(self.why))
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)


class AsyncWire:
    """One loop's way to one Redis: a ``WireProtocol`` (reopened after a loss) and the retry policy around each call.

    A call that fails with a lost connection or a timeout is sent again after the
    policy's backoff, as the sync client's ``Retry`` does: the same at-least-once
    sending, so an enqueue may be stored twice only where the sync path's would be.
    """

    def __init__(self, pool: aioredis.ConnectionPool | None = None, *, client: aioredis.Redis | None = None) -> None:
        """A wire over ``pool``'s connections (one server), or over ``client`` (a cluster's or sentinel's, which route)."""
        if pool is None and client is None:
            raise TypeError("AsyncWire needs a pool or a client")
        self.pool = pool if pool is not None else getattr(client, "connection_pool", None)
        self.backoff, self.retries = connection.retry_policy()
        self._protocol: WireProtocol | None = None
        self._conn: Any = None  # redis.asyncio's connection whose socket the protocol took: kept, closed with it
        self._lock: asyncio.Lock | None = None
        self._client: aioredis.Redis | None = client  # the client's own way: routing, or when the socket cannot be taken
        self.takes_socket = hiredis is not None and client is None

    async def execute(self, *args: Any) -> Any:
        """The raw reply of one command (``HGETALL`` a flat list), sent again after a lost connection."""
        failures = 0
        while True:
            try:
                protocol = self._protocol
                if protocol is None or protocol.lost is not None:
                    protocol = await self._open()
                    if protocol is None:
                        return await self._client_call(args)
                return await protocol.call(args)
            except (ConnectionError, TimeoutError):
                failures += 1
                if failures > self.retries:
                    raise
                await asyncio.sleep(self.backoff.compute(failures))

    async def execute_pinned(self, *commands: Sequence[Any]) -> list[Any] | None:
        """``WireProtocol.call_many`` on the wire's own socket (never sent again after a loss); ``None`` where the wire has none
        (a routing client's wire, or no hiredis): the caller must take another way to keep the commands on one connection."""
        protocol = self._protocol
        if protocol is None or protocol.lost is not None:
            protocol = await self._open()
        if protocol is None:
            return None
        return await protocol.call_many(commands)

    async def script_load(self, source: str) -> None:
        """Load a script where its calls go: this server, or every primary of a cluster (its client knows them)."""
        if self._client is not None and self._protocol is None and not self.takes_socket:
            await self._client.script_load(source)
        else:
            await self.execute("SCRIPT", "LOAD", source)

    async def hgetall_many(self, keys: Sequence[Any]) -> list[dict[str, str]]:
        """HGETALL of each key in one round trip: back to back on the socket, else in the client's pipeline."""
        if self._client is not None and self._protocol is None and not self.takes_socket:
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(key)
            return list(await pipe.execute())
        flat = await asyncio.gather(*(self.execute("HGETALL", key) for key in keys))
        return [dict(zip(f[::2], f[1::2], strict=True)) for f in flat]

    async def _client_call(self, args: Sequence[Any]) -> Any:
        if self._client is None:
            assert self.pool is not None
            self._client = aioredis.Redis(connection_pool=self.pool)
        reply = await self._client.execute_command(*args)
        if args[0] == "HGETALL" and isinstance(reply, dict):  # its response callback made a dict: flatten it back
            return [x for kv in reply.items() for x in kv]
        return reply

    async def _open(self) -> WireProtocol | None:
        """Connect as the pool would (handshake and all), then take its socket; ``None``: use the client."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._protocol is not None and self._protocol.lost is None:
                return self._protocol
            await self._drop()
            if not self.takes_socket or self.pool is None:
                return None
            conn = self.pool.make_connection()
            await conn.connect()
            transport = getattr(getattr(conn, "_writer", None), "transport", None)
            if transport is None:  # a redis-py whose connection keeps its socket elsewhere
                await conn.disconnect(nowait=True)
                self.takes_socket = False
                return None
            where = self.pool.connection_kwargs.get("path") or "{}:{}".format(
                self.pool.connection_kwargs.get("host", "localhost"), self.pool.connection_kwargs.get("port", 6379))
            protocol = WireProtocol(asyncio.get_running_loop(), self.pool.connection_kwargs.get("socket_timeout"), str(where))
            transport.set_protocol(protocol)
            protocol.connection_made(transport)
            self._protocol, self._conn = protocol, conn
            return protocol

    async def _drop(self) -> None:
        if self._conn is not None:
            conn, self._conn, self._protocol = self._conn, None, None
            await conn.disconnect(nowait=True)

    async def aclose(self) -> None:
        """Close the socket (waiting calls fail with ConnectionError) and the client's or pool's connections."""
        await self._drop()
        if self._client is not None:
            await topology.aclose(self._client)
        elif self.pool is not None:
            await self.pool.disconnect()

    @property
    def connected(self) -> bool:
        """Whether the wire's own socket is open (a wire over a routing client has none)."""
        return self._protocol is not None and self._protocol.lost is None
