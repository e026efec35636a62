"""asyncio Redis connections: one wire per event loop and Redis, connected as ``connection/clients.py``'s pools are.

An asyncio connection belongs to the loop that opened it, so each event loop
has its own wire (connection/async_wire.py: one pipelined socket) per Redis target, opened
by a ``redis.asyncio`` pool built from the same settings as the sync
pools (``connection.pool_kwargs``: URL, cache alias or embedded unix socket,
TLS, password, timeouts, retries, RESP2, ``str`` replies). A loop's wires are
closed when it shuts its async generators down, which ``asyncio.run``, asgiref's
``async_to_sync`` and the ASGI servers do before closing a loop; one closed
without that is forgotten the next time a wire is made (its sockets close when
collected). Nothing here starts a thread, and ``get_wire`` on a loop that has
its wire is a dictionary lookup.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis
from django.core.exceptions import ImproperlyConfigured
from redis.asyncio.retry import Retry as AsyncRetry

from django_redisq import connection
from django_redisq.connection import embedded, topology
from django_redisq.connection.async_wire import AsyncWire
from django_redisq.connection.embedded import EmbeddedServer
from django_redisq.core.options import Options

try:
    from redis.connection import HiredisRespSerializer
    from redis.utils import HIREDIS_AVAILABLE
except ImportError:  # an older redis-py
    HIREDIS_AVAILABLE = False


class _Packing:
    """Commands packed as the sync connections pack them: by hiredis's C encoder where it is installed.

    redis.asyncio packs every command in Python, a tenth of an enqueue's cost on the
    event loop; hiredis packs it for the sync client (``on_wire`` in store/scripts/runner.py makes the
    arguments safe for it the same way on both paths).
    """

    if HIREDIS_AVAILABLE:
        _packer = HiredisRespSerializer()

        def pack_command(self, *args: Any) -> list[bytes]:
            return self._packer.pack(*args)


class Connection(_Packing, aioredis.Connection):
    pass


class SSLConnection(_Packing, aioredis.SSLConnection):
    pass


class UnixDomainSocketConnection(_Packing, aioredis.UnixDomainSocketConnection):
    pass


class EmbeddedConnection(UnixDomainSocketConnection):
    """``connection/embedded.py``'s ``EmbeddedConnection`` on the event loop: a dead socket starts the project's server
    again (in a thread: the start waits for the server to answer), then connects."""

    def __init__(self, *, data_file: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.data_file = data_file

    async def _connect(self) -> None:
        try:
            await super()._connect()
        except OSError:
            self.path = await asyncio.to_thread(EmbeddedServer.of(self.data_file).ensure)
            await super()._connect()


ASYNC_CONNECTIONS: dict[type[Any], type[Any]] = {
    redis.Connection: Connection,
    redis.SSLConnection: SSLConnection,
    redis.UnixDomainSocketConnection: UnixDomainSocketConnection,
    embedded.EmbeddedConnection: EmbeddedConnection,
}
"""The asyncio twin of each sync connection class a URL, a cache or the embedded server gives."""


def _accepted(cls: type[Any]) -> set[str]:
    """The keyword arguments ``cls`` (and its bases) take."""
    names: set[str] = set()
    for base in cls.__mro__:
        init = base.__dict__.get("__init__")
        if init is not None:
            names |= set(inspect.signature(init).parameters) - {"self", "args", "kwargs"}
    return names


def async_pool_kwargs(options: Options) -> dict[str, Any]:
    """``connection.pool_kwargs`` for ``redis.asyncio``: the same target, credentials, TLS and timeouts.

    A setting the asyncio connection cannot honour (OCSP checks of a TLS URL, a
    connection class of its own) is an ``ImproperlyConfigured`` error, never
    silently dropped: the async path must not connect more loosely than the sync one.
    """
    kwargs = connection.pool_kwargs(options)
    sync_class = kwargs.pop("connection_class")
    twin = ASYNC_CONNECTIONS.get(sync_class)
    if twin is None:
        raise ImproperlyConfigured(f"{connection.describe(options)}: no asyncio twin of connection class {sync_class.__name__}; "
                                   "aenqueue/aget_result need redis.Connection, SSLConnection or UnixDomainSocketConnection.")
    kwargs["retry"] = AsyncRetry(*connection.retry_policy())
    accepted = _accepted(twin) | {"max_connections"}
    refused = {k: v for k, v in kwargs.items() if k not in accepted}
    if any(v not in (None, False) for v in refused.values()):
        raise ImproperlyConfigured(f"{connection.describe(options)}: redis.asyncio cannot honour {sorted(refused)}; "
                                   "aenqueue/aget_result would connect differently from enqueue.")
    return {"connection_class": twin, **{k: v for k, v in kwargs.items() if k in accepted}}


@dataclass
class LoopPools:
    """What one event loop holds: its wires (connection/async_wire.py) per Redis, per-loop state of their users, the generator that closes them."""

    wires: dict[tuple[Any, ...], AsyncWire] = field(default_factory=dict)
    state: dict[Any, Any] = field(default_factory=dict)  # e.g. abroker's enqueue batches, per queue
    keeper: AsyncIterator[None] | None = None


_lock = threading.Lock()
_loops: dict[asyncio.AbstractEventLoop, LoopPools] = {}


async def _close_with_loop(loop: asyncio.AbstractEventLoop, pools: LoopPools) -> AsyncIterator[None]:
    """Suspended for the loop's life; ``loop.shutdown_asyncgens()`` resumes it to close the loop's wires."""
    try:
        yield
    finally:
        with _lock:
            if _loops.get(loop) is pools:
                del _loops[loop]
        for wire in list(pools.wires.values()):
            await wire.aclose()


async def get_wire(options: Options) -> tuple[AsyncWire, LoopPools]:
    """The running loop's wire to the options' Redis (made on first use), and the loop's holdings."""
    loop = asyncio.get_running_loop()
    key = connection.target(options)
    pools = holdings(loop)
    if pools is not None:
        wire = pools.wires.get(key)
        if wire is not None:
            return wire, pools
    if topology.kind(options) == "single":  # one server: the wire takes a socket its pool opened
        kwargs, settings = async_pool_kwargs(options), {}  # may start the embedded server (once per process)
    else:  # a cluster or sentinel client routes each call (to a queue's node; to the master after a failover)
        kwargs, settings = {}, {**connection.pool_kwargs(options), "retry": AsyncRetry(*connection.retry_policy())}
    with _lock:
        for old in [lp for lp in _loops if lp.is_closed()]:  # closed without shutting its generators down
            del _loops[old]
        pools = _loops.get(loop)
        if pools is None:
            pools = _loops[loop] = LoopPools()
        wire = pools.wires.get(key)
        if wire is None:
            wire = pools.wires[key] = (AsyncWire(aioredis.ConnectionPool(**kwargs)) if kwargs
                                       else AsyncWire(client=topology.async_client(options, settings, {})))
    if pools.keeper is None:
        pools.keeper = _close_with_loop(loop, pools)
        await pools.keeper.__anext__()  # its first step registers it with the loop (sys.set_asyncgen_hooks)
    return wire, pools


def holdings(loop: asyncio.AbstractEventLoop) -> LoopPools | None:
    """What ``loop`` holds (its wires, its users' state), None before its first wire or after it closed."""
    return _loops.get(loop)


async def aclose() -> None:
    """Close the running loop's wires now (an ASGI lifespan shutdown may call it); the next call opens new ones."""
    loop = asyncio.get_running_loop()
    with _lock:
        pools = _loops.pop(loop, None)
    if pools is not None:
        for wire in pools.wires.values():
            await wire.aclose()


def forget() -> None:
    """Drop every loop's wires without touching their sockets (``connection.reset``; a loop may be gone)."""
    with _lock:
        _loops.clear()
