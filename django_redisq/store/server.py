"""The server itself, as the worker's start and the commands see it: there, new enough, and able to keep tasks.

``check_server`` pings every primary (a cluster's too) and checks the version;
``durability_warnings`` reads the settings under which Redis can lose tasks.
Both answer in one line a person can act on, never with a password in it.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.sentinel import MasterNotFoundError

from django_redisq.connection import topology
from django_redisq.connection.clients import BLOCK_TIMEOUT, get_client, is_transient
from django_redisq.connection.topology import describe
from django_redisq.core.options import Options
from django_redisq.core.redact import redact
from django_redisq.exceptions import RedisUnavailable

# BLOCK_TIMEOUT (how long a fetch blocks) and is_transient (may a failed step be tried again) are the connection's,
# named here for the worker, which reaches Redis only through the store
__all__ = ["BLOCK_TIMEOUT", "MIN_REDIS", "check_server", "describe", "durability_warnings", "is_transient"]

MIN_REDIS = (6, 2, 0)  # BLMOVE / LMOVE


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
        raise RedisUnavailable(f"cannot reach Redis at {where}: {type(exc).__name__}: {redact(str(exc))}") from None
    except OSError as exc:
        raise RedisUnavailable(f"cannot reach Redis at {where}: {redact(str(exc))}") from None
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
