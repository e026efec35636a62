"""Which Redis deployment the options name: one server, a master found by Sentinel, or a Redis Cluster.

``connection.pool_kwargs`` works out how to connect (address, credentials, TLS,
timeouts, retries) exactly as for one server; this module turns those settings
into the client of the deployment, so the rest of the code still asks
``connection.get_client(options)`` and gets something with the commands of a
``redis.Redis``:

- **Cluster** (``CLUSTER: True``): a ``RedisCluster`` that learns the nodes from
  the one given. Every key of a queue shares its hash tag, so each script and
  each BLMOVE goes to the node of the queue's slot; pipelines
  (``transaction=False``) are split per node by the client; commands without a
  key (TIME, INFO) go to one node, and the checks that must see every node fan
  out (``node_infos``).
- **Sentinel** (``SENTINELS`` + ``SENTINEL_MASTER``): a ``redis.Redis`` on a
  ``SentinelConnectionPool``, which asks the sentinels where the master is on
  every new connection, so after a failover the retries reconnect to the
  promoted replica.

The checks of these options (ids E060-E067) are here too, beside what they guard.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import redis
import redis.retry
from django.core.exceptions import ImproperlyConfigured
from redis.backoff import NoBackoff
from redis.cluster import REDIS_ALLOWED_KEYS, ClusterPipeline, RedisCluster
from redis.commands.core import Script
from redis.exceptions import RedisClusterException

from django_redisq.connection import schemes
from django_redisq.core.redact import redact, shown

if TYPE_CHECKING:
    import redis.asyncio as aioredis  # only an event loop's client loads redis.asyncio: a sync worker never does

    from django_redisq.core.options import Options

SENTINEL_KWARGS_KEYS = frozenset({
    "username", "password", "ssl", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname",
    "socket_timeout", "socket_connect_timeout",
})
"""What ``SENTINEL_KWARGS`` may set: how to reach and log in to the sentinels themselves (not the master)."""
SENTINEL_TIMEOUT = 2.0
"""Seconds a sentinel may take to answer before the next one is asked (unless SENTINEL_KWARGS says otherwise)."""


def validate(w: str, opts: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The problems of the CLUSTER / SENTINEL_* options of one backend as ``(check id, message, hint)``."""
    problems: list[tuple[str, str, str]] = []
    cluster = opts.get("CLUSTER", False)
    sentinels = opts.get("SENTINELS")
    url = opts.get("REDIS_URL")
    parts = _split(url)
    if not isinstance(cluster, bool):
        problems.append(("E060", f"{w}['CLUSTER'] must be True or False, got {shown(cluster)}.", 'Set "CLUSTER": True for a Redis Cluster.'))
        cluster = False
    if cluster:
        if opts.get("EMBEDDED") or sentinels is not None:
            other = "EMBEDDED" if opts.get("EMBEDDED") else "SENTINELS"
            problems.append(("E061", f"{w} sets CLUSTER and {other}; a Redis Cluster is neither embedded nor watched by sentinels.",
                             "Give CLUSTER: True with REDIS_URL (or CACHE_ALIAS) naming any node of the cluster."))
        if parts is not None and (parts.scheme == "unix" or parts.path not in ("", "/", "/0")):
            problems.append(("E062", f"{w}['REDIS_URL'] names {'a unix socket' if parts.scheme == 'unix' else f'database {shown(parts.path[1:])}'}, "
                                     "which a Redis Cluster cannot serve.",
                             'A cluster has database 0 only, over TCP: for example "redis://10.0.0.1:7000/0".'))
    if sentinels is None:
        for name in ("SENTINEL_MASTER", "SENTINEL_KWARGS"):
            if name in opts:
                problems.append(("E065", f"{w} sets {name} without SENTINELS.", 'Add "SENTINELS": [("10.0.0.1", 26379), ...], or remove it.'))
        return problems
    if not addresses(sentinels):
        problems.append(("E063", f"{w}['SENTINELS'] must be a non-empty list of (host, port) pairs, got {shown(sentinels)}.",
                         'For example [("10.0.0.1", 26379), ("10.0.0.2", 26379), ("10.0.0.3", 26379)].'))
    master = opts.get("SENTINEL_MASTER")
    if not isinstance(master, str) or not master:
        problems.append(("E064", f"{w}['SENTINEL_MASTER'] must name the master the sentinels monitor, got {shown(master)}.",
                         'The name of its "sentinel monitor <name> ..." line, for example "mymaster".'))
    extra = opts.get("SENTINEL_KWARGS", {})
    if not isinstance(extra, dict) or set(extra) - SENTINEL_KWARGS_KEYS:
        bad = sorted(map(str, set(extra) - SENTINEL_KWARGS_KEYS)) if isinstance(extra, dict) else extra
        problems.append(("E066", f"{w}['SENTINEL_KWARGS'] must be a dict of how to reach the sentinels; not {shown(bad)}.",
                         f"Known keys: {', '.join(sorted(SENTINEL_KWARGS_KEYS))}. The master's password goes in REDIS_URL."))
    if opts.get("CACHE_ALIAS") or opts.get("EMBEDDED"):
        problems.append(("E067", f"{w} sets SENTINELS and {'CACHE_ALIAS' if opts.get('CACHE_ALIAS') else 'EMBEDDED'}; the sentinels say where Redis is.",
                         "With SENTINELS, give the master's password, TLS and database in REDIS_URL, e.g. \"redis://:<password>@mymaster/0\"."))
    elif parts is not None and (parts.scheme == "unix" or _port(parts) or (parts.hostname and parts.hostname != master)):
        name = redact(master) if isinstance(master, str) and master else "mymaster"
        problems.append(("E067", f"{w}['REDIS_URL'] names a server ({shown(url)}), but with SENTINELS the sentinels say where the master is.",
                         f'Name the master instead of a host and leave out the port: "redis://:<password>@{name}/0" '
                         "(rediss:// for TLS; valkey:// and valkeys:// alike); only its credentials, TLS and database are used."))
    return problems


def _port(parts: Any) -> Any:
    """The URL's port; a port that is not a number counts as one (it names a server all the same)."""
    try:
        return parts.port
    except ValueError:
        return True


def cautions(w: str, opts: dict[str, Any]) -> list[tuple[str, str, str]]:
    """What works but may not be what was meant, as ``(check id, message, hint)`` (system check warnings).

    W060: the master is reached over TLS (``rediss://`` or ``valkeys://``) but the sentinels are not
    (no ``ssl`` in ``SENTINEL_KWARGS``): the sentinels' answers, and their
    password if they have one, cross the network in clear text.
    """
    out: list[tuple[str, str, str]] = []
    extra = opts.get("SENTINEL_KWARGS") or {}
    parts = _split(opts.get("REDIS_URL"))
    if opts.get("SENTINELS") and parts is not None and parts.scheme in schemes.TLS and isinstance(extra, dict) and not extra.get("ssl"):
        out.append(("W060", f"{w}: the master is reached over TLS ({parts.scheme}://), the sentinels in clear text.",
                    'If the sentinels listen on TLS, add "ssl": True (and "ssl_ca_certs") to SENTINEL_KWARGS; '
                    "silence this check (SILENCED_SYSTEM_CHECKS) if they are on a trusted network."))
    return out


def _split(url: Any) -> Any:
    try:
        return urlsplit(url) if isinstance(url, str) else None
    except ValueError:
        return None


def addresses(value: Any) -> list[tuple[str, int]]:
    """``SENTINELS`` as (host, port) pairs; empty when it is not a non-empty list of them."""
    if not isinstance(value, (list, tuple)) or not value:
        return []
    out = []
    for item in value:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str) and item[0]
                and isinstance(item[1], int) and not isinstance(item[1], bool) and 0 < item[1] < 65536):
            return []
        out.append((item[0], item[1]))
    return out


def kind(options: Options) -> str:
    """``"cluster"``, ``"sentinel"`` or ``"single"``."""
    return "cluster" if options.cluster else "sentinel" if options.sentinels else "single"


def describe(options: Options) -> str:
    """Where the options point, safe to log: never a password (the URL or cache, with the deployment around it).

    The URL without its userinfo and query; what is left goes through ``redact`` all the same.
    """
    if options.embedded:
        return redact(f"embedded Redis at {options.embedded_path}")
    if options.cache_alias:
        where = f"the Redis of cache {shown(options.cache_alias)}"
    else:
        parts = urlsplit(options.redis_url or "")
        host = parts.hostname or parts.path or "?"
        port = _port(parts)
        port = f":{port}" if isinstance(port, int) and not isinstance(port, bool) else ""
        where = f"{parts.scheme}://{host}{port}{parts.path if parts.hostname else ''}"
    if options.cluster:
        where = f"the Redis Cluster of node {where}"
    elif options.sentinels:
        where = f"Redis master {shown(options.sentinel_master)} of sentinels {', '.join(f'{h}:{p}' for h, p in options.sentinels)}"
    return redact(where)


def _tls(kwargs: dict[str, Any], what: str) -> dict[str, Any]:
    """Settings for a client that picks its own connection class: ``ssl=True`` in place of an SSLConnection."""
    # orig_*: redis-py's copy of the address and timeouts, kept per connection to undo maintenance changes
    out = {k: v for k, v in kwargs.items() if not k.startswith("orig_")}
    cls = out.pop("connection_class", redis.Connection)
    if issubclass(cls, redis.SSLConnection):
        out["ssl"] = True
    elif issubclass(cls, redis.UnixDomainSocketConnection):
        raise ImproperlyConfigured(f"{what} over a unix socket: give a redis://, rediss://, valkey:// or valkeys:// address.")
    elif cls is not redis.Connection:
        raise ImproperlyConfigured(f"{what}: connection class {cls.__name__} cannot be honoured; use redis.Connection or SSLConnection.")
    out.pop("path", None)
    return out


class _ClusterScript(Script):
    """A script whose calls queued in a cluster pipeline send its text (EVAL), not only its digest.

    redis-py loads a plain pipeline's scripts before executing it, but not a
    cluster pipeline's: there an EVALSHA of a script that node has not seen yet
    (a fresh or a promoted node) fails the whole pipeline with NOSCRIPT. The
    text costs some bytes on the two pipelined script calls (heartbeats, saved
    metadata); direct calls stay EVALSHA, loaded again on NOSCRIPT.
    """

    def __call__(self, keys: Sequence[Any] | None = None, args: Iterable[Any] | None = None, client: Any = None) -> Any:
        if isinstance(client, ClusterPipeline):
            keys = list(keys or [])
            return client.execute_command("EVAL", self.script, len(keys), *keys, *(args or []))
        return super().__call__(keys, args, client)


class QueueCluster(RedisCluster):
    """``RedisCluster`` whose registered scripts can be pipelined (see ``_ClusterScript``)."""

    def register_script(self, script: Any) -> Script:
        return _ClusterScript(self, script)


def sync_client(options: Options, kwargs: dict[str, Any]) -> redis.Redis:
    """The client of the deployment for pool settings ``kwargs`` (``connection.pool_kwargs``, tuned for its purpose).

    A cluster client is typed as ``redis.Redis``: it has the same command methods
    (the only ones this project calls), and callers need not know the topology.
    """
    if options.cluster:
        try:  # it asks the node for the cluster's layout now
            return cast("redis.Redis", QueueCluster(**_cluster_kwargs(options, kwargs)))
        except RedisClusterException as exc:  # "cannot be connected": transient, like any unreachable Redis
            raise redis.ConnectionError(redact(f"Redis Cluster: {exc}")) from exc
    if options.sentinels:
        from redis.sentinel import Sentinel  # only a Sentinel deployment loads it

        settings = _sentinel_kwargs(options, kwargs)
        manager = Sentinel(list(options.sentinels), sentinel_kwargs=_sentinel_own(options, kwargs))
        return manager.master_for(options.sentinel_master, redis_class=redis.Redis, **settings)
    return redis.Redis(connection_pool=redis.ConnectionPool(**kwargs))


def _cluster_kwargs(options: Options, kwargs: dict[str, Any]) -> dict[str, Any]:
    out = _tls(kwargs, f"{describe(options)}: a Redis Cluster")
    if out.pop("db", 0):
        raise ImproperlyConfigured(f"{describe(options)}: a Redis Cluster has database 0 only; use db 0 in the URL or the cache's LOCATION.")
    out.pop("retry_on_error", None)  # the cluster client retries ConnectionError and TimeoutError itself (with `retry`)
    refused = sorted(k for k, v in out.items() if k not in (*REDIS_ALLOWED_KEYS, "retry", "host", "port") and v not in (None, False))
    if refused:
        raise ImproperlyConfigured(f"{describe(options)}: the cluster client cannot honour {refused}; it would connect differently from one server.")
    return {k: v for k, v in out.items() if k in (*REDIS_ALLOWED_KEYS, "retry", "host", "port")}


def _sentinel_kwargs(options: Options, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The master's connection settings: the sentinels give its address, the URL the rest."""
    out = _tls(kwargs, f"{describe(options)}: a Sentinel-watched master")
    out.pop("host", None)
    out.pop("port", None)
    return out


def _sentinel_own(options: Options, kwargs: dict[str, Any], retry: Any = None) -> dict[str, Any]:
    """How to reach the sentinels: short timeouts and no retries (a dead sentinel must not stall the search), then SENTINEL_KWARGS.

    ``retry`` is a ``Retry`` that does not retry (``redis.asyncio``'s for the asyncio
    client; the sync one by default). Without it each sentinel's client has
    redis-py's default (3 retries, backoff from 1 s): one sentinel down cost every
    master lookup about 4 s, and a wrong sentinel password (AuthenticationError is a
    ConnectionError) about 12 s per lookup, 53 s before ``check_server`` could say
    so. The lookup goes on to the next sentinel by itself, and the master
    connection's own retry (``connection.pool_kwargs``) repeats the whole lookup.
    """
    timeout = min(SENTINEL_TIMEOUT, float(kwargs.get("socket_timeout") or SENTINEL_TIMEOUT) / max(1, len(options.sentinels)))
    once = retry if retry is not None else redis.retry.Retry(NoBackoff(), 0)
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout, "retry": once, **options.sentinel_kwargs}


def no_master(options: Options, where: str, exc: Exception) -> str:
    """One line for a ``MasterNotFoundError``: redis-py's text holds a repr of every sentinel's client (about 1,500
    characters each, passwords redacted), and a wrong SENTINEL_KWARGS password shows only as one of the class names in it."""
    text = str(exc)
    if "AuthenticationError" in text:
        return f"Redis at {where}: the sentinels refused our credentials (check SENTINEL_KWARGS' password/username)."
    named = f"no sentinel named a master {options.sentinel_master!r} that is up"
    if " : " in text:  # redis-py collected errors: some sentinels (maybe all) could not be asked
        return f"cannot reach Redis at {where}: {named}, and some could not be reached (check SENTINELS, their TLS and SENTINEL_KWARGS)."
    return f"cannot reach Redis at {where}: {named}."


def async_client(options: Options, kwargs: dict[str, Any], pool_kwargs: Any) -> aioredis.Redis:
    """The asyncio twin of ``sync_client``.

    ``kwargs`` are ``connection.pool_kwargs``' settings with an asyncio ``retry``;
    ``pool_kwargs`` turns such settings into an asyncio ``ConnectionPool``'s for one
    server (async_pools.async_pool_kwargs: its connection class twins and checks).
    """
    import redis.asyncio as aioredis  # only an event loop's client loads redis.asyncio

    if options.cluster:
        from redis.asyncio.cluster import RedisCluster as AsyncCluster  # (as above)

        out = _cluster_kwargs(options, kwargs)
        out.pop("connection_class", None)
        accepted = set(inspect.signature(AsyncCluster.__init__).parameters) - {"self"}
        refused = sorted(k for k, v in out.items() if k not in accepted and v not in (None, False))
        if refused:
            raise ImproperlyConfigured(f"{describe(options)}: redis.asyncio's cluster client cannot honour {refused}.")
        out["retry_on_error"] = kwargs.get("retry_on_error")
        return cast("aioredis.Redis", AsyncCluster(**{k: v for k, v in out.items() if k in accepted}))
    if options.sentinels:
        from redis.asyncio.retry import Retry as AsyncRetry  # (as above)
        from redis.asyncio.sentinel import Sentinel as AsyncSentinel  # (as above)

        settings = _sentinel_kwargs(options, kwargs)
        own = _sentinel_own(options, kwargs, AsyncRetry(NoBackoff(), 0))
        manager = AsyncSentinel(list(options.sentinels), sentinel_kwargs=own)
        return manager.master_for(options.sentinel_master, redis_class=aioredis.Redis, **settings)
    return aioredis.Redis(connection_pool=aioredis.ConnectionPool(**pool_kwargs))


def close(client: Any) -> None:
    """Close a sync client's sockets, whichever deployment it serves."""
    if isinstance(client, RedisCluster):
        client.disconnect_connection_pools()
    else:
        client.connection_pool.disconnect()


async def aclose(client: Any) -> None:
    """Close an asyncio client's sockets, whichever deployment it serves."""
    from redis.asyncio.cluster import RedisCluster as AsyncCluster  # (as above)

    if isinstance(client, AsyncCluster):
        await client.aclose()
    else:
        await client.connection_pool.disconnect()


def node_infos(client: Any, section: str | None = None) -> list[dict[str, Any]]:
    """INFO of every node that holds data: each primary of a cluster, else the one server (or master)."""
    if isinstance(client, RedisCluster):
        replies = client.info(section, target_nodes=RedisCluster.PRIMARIES) if section else client.info(target_nodes=RedisCluster.PRIMARIES)
        return list(replies.values()) if isinstance(replies, dict) and all(isinstance(v, dict) for v in replies.values()) else [replies]
    return [client.info(section) if section else client.info()]


def node_configs(client: Any, name: str) -> list[Any]:
    """``CONFIG GET name`` of every node that holds data (``None`` where CONFIG is refused)."""
    nodes = client.get_primaries() if isinstance(client, RedisCluster) else [None]
    out = []
    for node in nodes:
        try:
            reply = client.config_get(name, target_nodes=node) if node is not None else client.config_get(name)
        except redis.RedisError:  # CONFIG is often disabled on managed Redis
            reply = {}
        out.append(reply.get(name))
    return out
