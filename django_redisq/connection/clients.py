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
from django.core.exceptions import ImproperlyConfigured
from redis.backoff import AbstractBackoff, ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry

from django_redisq.connection import schemes, topology
from django_redisq.connection.embedded import EmbeddedConnection, EmbeddedServer
from django_redisq.core.options import Options
from django_redisq.exceptions import NotDurable

BLOCK_TIMEOUT = 1.0
"""Seconds a worker blocks waiting for work; bounds how long a stop request waits."""

_lock = threading.Lock()
_clients: dict[tuple[Any, ...], redis.Redis] = {}


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
    redis.exceptions.MovedError,  # a durable step still redirected after following the slot (store/scripts/durable.py): not run
    redis.exceptions.AskError,
    NotDurable,  # DURABLE_REPLICAS: the replicas have not caught up yet (store/scripts/durable.py)
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


def retry_policy() -> tuple[AbstractBackoff, int]:
    """How our pools retry a lost connection or a timeout: backoff and count, for a sync or an asyncio ``Retry``."""
    return ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3


def pool_kwargs(options: Options) -> dict[str, Any]:
    """How our pools connect and behave; connection/async_pools.py builds its asyncio pools from the same."""
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
    if options.embedded:  # the project's own server (connection/embedded.py): started by the first connection it misses
        path = EmbeddedServer.of(options.embedded_path).socket
        return {"connection_class": EmbeddedConnection, "path": path, "data_file": options.embedded_path, **common}
    if options.cache_alias:
        try:
            from django_redis import get_redis_connection  # the optional extra: only for CACHE_ALIAS
        except ImportError as exc:  # settings/read.py reports it first, as check E018
            raise ImproperlyConfigured('CACHE_ALIAS needs the django-redis package: pip install "django-redisq[django-redis]".') from exc

        base = get_redis_connection(options.cache_alias).connection_pool
        return {**_settings_of(base), "connection_class": base.connection_class, **common}
    pool = redis.ConnectionPool.from_url(schemes.wire_url(options.redis_url or ""))
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


def forget() -> None:
    """Close and forget this process's sync clients (``connection.reset`` forgets the fast paths' too)."""
    with _lock:
        for client in _clients.values():
            topology.close(client)
        _clients.clear()
