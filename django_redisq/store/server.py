"""The server itself, as the worker's start, the commands and a program's calls see it: there, new enough, and able
to keep tasks.

``check_server`` pings every primary (a cluster's too) and checks the version;
``durability_warnings`` reads the settings under which Redis can lose tasks;
``door`` and ``reaching`` turn redis-py's "cannot reach" errors in the calls a
program makes (enqueue, results, cancel, publish, workflows) into one
``RedisUnreachable`` (before, ``enqueue()`` with Redis down was 78 lines of
redis-py traceback and no hint). All answer in one line a person can act on,
never with a password in it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

import redis
from redis.sentinel import MasterNotFoundError

from django_redisq.connection import topology
from django_redisq.connection.clients import BLOCK_TIMEOUT, get_client, is_transient
from django_redisq.connection.embedded import EmbeddedServer
from django_redisq.connection.topology import describe
from django_redisq.core.options import Options
from django_redisq.core.redact import redact
from django_redisq.exceptions import RedisUnavailable, RedisUnreachable

# BLOCK_TIMEOUT (how long a fetch blocks) and is_transient (may a failed step be tried again) are the connection's,
# named here for the worker, which reaches Redis only through the store
__all__ = [
    "BLOCK_TIMEOUT",
    "MIN_REDIS",
    "UNREACHABLE",
    "EmbeddedServer",
    "check_server",
    "describe",
    "door",
    "durability_warnings",
    "embedded_server",
    "is_transient",
    "reaching",
    "unreachable",
]

MIN_REDIS = (6, 2, 0)  # BLMOVE / LMOVE
F = TypeVar("F", bound=Callable[..., Any])


def check_server(options: Options) -> dict[str, Any]:
    """Ping Redis (every primary of a cluster) and check its version; ``RedisUnavailable`` with a one-line reason.

    Returns the INFO server section of the oldest node.
    """
    where = describe(options)
    try:
        infos = topology.node_infos(get_client(options), "server")
    except (redis.RedisError, OSError) as exc:
        raise RedisUnavailable(_why(options, where, exc)) from None
    info = min(infos, key=_version)
    version = _version(info)
    if version < MIN_REDIS:
        raise RedisUnavailable(
            f"Redis at {where} is version {info.get('redis_version')}; django_redisq needs 6.2 or newer (for LMOVE/BLMOVE)."
        )
    return info


UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)
"""What redis-py raises when the server cannot be reached (refused, timed out, gone, no master, credentials refused):
the doors a program calls (enqueue, results, cancel, publish, workflows) catch these and raise ``unreachable``."""


def unreachable(options: Options, exc: BaseException) -> BaseException:
    """``exc`` as one ``RedisUnreachable`` line, with the server as configured and what to check; ours unchanged."""
    if isinstance(exc, RedisUnavailable):  # already ours (a door inside a door), or NotDurable: it says more
        return exc
    why = _why(options, describe(options), exc)
    if isinstance(exc, redis.AuthenticationError) or _no_master(exc):  # the line says what to check already
        return RedisUnreachable(why, cause=exc)
    hint = ("the embedded server could not be started" if options.embedded
            else "is a Redis server running there, and is that the address in the settings?")
    return RedisUnreachable(f"{why} ({hint})", cause=exc)


def door(options_of: Callable[[Any], Options]) -> Callable[[F], F]:
    """A method a program calls (sync or async) that raises ``RedisUnreachable`` where redis-py said it cannot reach
    Redis; ``options_of(self)`` says which server was meant. A try block costs nothing until it raises: ``.delay()``
    pays one call frame for it."""
    def wrap(method: F) -> F:
        if inspect.iscoroutinefunction(method):
            @functools.wraps(method)
            async def awaited(self: Any, *args: Any, **kwargs: Any) -> Any:
                try:
                    return await method(self, *args, **kwargs)
                except UNREACHABLE as exc:
                    raise unreachable(options_of(self), exc) from None

            return cast(F, awaited)

        @functools.wraps(method)
        def called(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except UNREACHABLE as exc:
                raise unreachable(options_of(self), exc) from None

        return cast(F, called)

    return wrap


class reaching:  # a class, used as a function: ``with reaching(options):``
    """Around a call a program made: redis-py's "cannot reach" errors leave it as one ``RedisUnreachable``."""

    __slots__ = ("options",)

    def __init__(self, options: Options) -> None:
        self.options = options

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if exc is not None and isinstance(exc, UNREACHABLE) and not isinstance(exc, RedisUnavailable):
            raise unreachable(self.options, exc) from None


def _why(options: Options, where: str, exc: BaseException) -> str:
    """One line for a failed first contact, never with a password in it."""
    if isinstance(exc, redis.AuthenticationError):
        return f"Redis at {where} refused our credentials (check the password/username)."
    if _no_master(exc) and isinstance(exc, Exception):  # the sentinels' account: a wrong SENTINEL_KWARGS password is one of its causes
        return topology.no_master(options, where, exc)
    if isinstance(exc, redis.RedisError):
        return f"cannot reach Redis at {where}: {type(exc).__name__}: {redact(str(exc))}"
    return f"cannot reach Redis at {where}: {redact(str(exc))}"


def embedded_server(options: Options) -> EmbeddedServer:
    """The project's embedded server (``EMBEDDED``: connection/embedded.py), for its status and its stop."""
    return EmbeddedServer.of(options.embedded_path)


def _no_master(exc: BaseException) -> bool:
    """No master from the sentinels: redis-py's sync ``MasterNotFoundError`` or its asyncio twin (another class of the
    same name, not imported here: a sync process never loads redis.asyncio for it)."""
    return isinstance(exc, MasterNotFoundError) or type(exc).__name__ == "MasterNotFoundError"


def _version(info: dict[str, Any]) -> tuple[int, ...]:
    return tuple(int(p) for p in str(info.get("redis_version", "0.0.0")).split(".")[:3])


def durability_warnings(options: Options) -> list[str]:
    """Redis settings that can lose tasks: an evicting memory policy, no persistence (on any primary of a cluster)."""
    client = get_client(options)
    try:
        infos = topology.node_infos(client)
    except redis.RedisError:
        return []
    snapshots = topology.node_configs(client, "save")
    warnings: list[str] = []
    for info, saves in zip(infos, snapshots, strict=False):
        policy = info.get("maxmemory_policy", "noeviction")
        text = (f"Redis maxmemory-policy is {policy!r}: under memory pressure Redis deletes keys, including queued tasks. "
                "Set maxmemory-policy noeviction.")
        if policy != "noeviction" and text not in warnings:
            warnings.append(text)
        text = "Redis persistence is off: a Redis restart loses every queued task. Set appendonly yes."
        if not info.get("aof_enabled") and saves == "" and text not in warnings:
            warnings.append(text)
    return warnings
