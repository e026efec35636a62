"""The sync script calls' wire to Redis: a pool's connections without redis-py's per-command wrappers.

Every task passes through a few script calls (enqueue, fetch, ack), and
``Redis.execute_command`` spends on each about as long as the round trip
itself: a pool checkout under a lock that also polls the socket for stray data,
observability hooks, a retry wrapper and response callbacks. ``Wire`` keeps its
own idle connections (a LIFO list, which needs no lock in CPython) made exactly
as the pool makes them (address, TLS, AUTH, SELECT, timeouts), sends the
command packed by hiredis and reads the reply with the connection's own parser,
so replies and error classes are the ones ``execute_command`` gives.

Kept from the pool: its connection class and arguments, its retry policy (the
connection's ``Retry``: the heartbeat's pool does not retry), ``str`` replies.
A connection that failed is closed, never reused; a reply error leaves it in
step and it goes back. After ``fork`` the child forgets the parent's
connections (it never writes to a socket the parent uses). A pool that is not
a plain ``redis.ConnectionPool`` of one server (a cluster's, a sentinel's)
gets no wire: its client's own ``execute_command`` routes the call.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.exceptions import ResponseError

_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - a dependency of redis[hiredis]
    _pack = None

_wires: weakref.WeakSet[Wire] = weakref.WeakSet()


class Wire:
    """Script calls on one pool's server, thread-safe and fork-safe."""

    def __init__(self, pool: redis.ConnectionPool) -> None:
        self.pool = pool
        self._idle: list[Any] = []
        self._retry: Any = None
        _wires.add(self)

    def execute(self, *args: Any) -> Any:
        """The reply of one command, as ``execute_command`` would give it (EVALSHA and other calls without callbacks)."""
        retry = self._retry
        if retry is None:  # the policy each connection of the pool has (retry_on_error included)
            self._idle.append(conn := self._new())
            retry = self._retry = conn.retry
        return retry.call_with_retry(lambda: self._once(args), _ignore)

    def send_all(self, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The replies of ``commands`` sent back to back in one write, a reply error in its place (not raised).

        Never re-sent: after a failed connection the commands may or may not have run, and only the caller
        knows how to find out (store/broker/plain.py); the error is raised for it to decide."""
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = self._new()
        try:
            # one buffer, one sendall: a list would be a send per command, and the server could read the first alone
            packed = b"".join(_pack(c) for c in commands) if _pack is not None else b"".join(conn.pack_commands(commands))
            conn.send_packed_command([packed], check_health=False)
            replies = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            conn.disconnect()
            raise
        self._idle.append(conn)
        return replies

    def _new(self) -> Any:
        """A connection as the pool makes one (not counted against its max_connections: it is never the pool's)."""
        return self.pool.connection_class(**self.pool.connection_kwargs)

    def _once(self, args: tuple[Any, ...]) -> Any:
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = self._new()
        try:
            conn.send_packed_command([_pack(args)] if _pack is not None else conn.pack_command(*args), check_health=False)
            reply = conn.read_response()
        except ResponseError:
            self._idle.append(conn)  # read in full: the connection is in step
            raise
        except BaseException as exc:
            conn.disconnect()
            if isinstance(exc, redis.ConnectionError):  # the server dropped clients (CLIENT KILL, a restart): so the
                self._prune()                           # retry does not pick another idle connection that is dead too
            raise
        self._idle.append(conn)
        return reply

    def _prune(self) -> None:
        """Close the idle connections the server has closed (one non-blocking read each; only after a failure).
        Each is taken off the idle list first, so no other thread is using it while it is looked at."""
        kept = []
        for _ in range(len(self._idle)):
            try:
                conn = self._idle.pop()
            except IndexError:  # another thread took the last one
                break
            try:
                closed = conn.can_read(0)
            except (redis.ConnectionError, OSError):
                closed = True
            if closed:
                conn.disconnect()
            else:
                kept.append(conn)
        self._idle.extend(kept)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.disconnect()

    def forget(self) -> None:
        """In a forked child: drop the parent's connections without touching their sockets."""
        self._idle = []


def _ignore(error: Exception) -> None:
    """A failed connection is already closed by ``_once``; the retry's backoff is all there is to do."""


def wire_for(client: redis.Redis) -> Callable[..., Any]:
    """``execute``-like callable for ``client``: a ``Wire`` for a plain pool, else the client's ``execute_command``."""
    wire = own_wire(client)
    return client.execute_command if wire is None else wire.execute


def own_wire(client: redis.Redis) -> Wire | None:
    """The ``Wire`` of ``client``'s plain pool of one server; None for a cluster's, a sentinel's or a cached one."""
    pool = getattr(client, "connection_pool", None)
    if type(pool) is not redis.ConnectionPool or type(client) is not redis.Redis or getattr(pool, "cache", None) is not None:
        return None
    with _lock:
        wire = _by_pool.get(pool)
        if wire is None:
            wire = _by_pool[pool] = Wire(pool)
    return wire


_lock = threading.Lock()
_by_pool: weakref.WeakKeyDictionary[redis.ConnectionPool, Wire] = weakref.WeakKeyDictionary()


def close_all() -> None:
    """Close every wire's idle connections (``connection.reset``)."""
    for wire in list(_wires):
        wire.close()


def _after_fork() -> None:
    for wire in list(_wires):
        wire.forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
