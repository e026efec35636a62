"""Connections held apart from every pool: one per server that a worker's presence is proven on.

A pooled connection is lent to whichever thread asks and may be replaced at
any time, so its client id says nothing lasting. A presence link is opened
here, owned by one thread, and only ever idle: the server drops it when, and
only when, the process dies (the kernel closes its sockets), an operator kills
it, or the network resets it. ``store/steps/presence.py`` gives it its meaning.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.connection import AbstractConnection

from django_redisq.connection.topology import QueueCluster


def node_client(client: redis.Redis, key: str) -> redis.Redis:
    """The client of the one server that holds ``key``: ``client`` itself, but on a Cluster the slot's node."""
    if isinstance(client, QueueCluster):
        return client.get_redis_connection(client.get_node_from_key(key))
    return client


def node_address(client: redis.Redis, key: str) -> str:
    """``host:port`` of the server that holds ``key`` as the client knows it now ('' for one server or Sentinel)."""
    if isinstance(client, QueueCluster):
        node = client.get_node_from_key(key)
        return f"{node.host}:{node.port}"
    return ""


def open_link(client: redis.Redis, key: str) -> AbstractConnection:
    """A new, connected connection to the server that holds ``key``, with the client's settings (TLS, credentials,
    timeouts; through Sentinel, to the master it names now) but in no pool: its owner closes it."""
    pool: Any = node_client(client, key).connection_pool
    conn: AbstractConnection = pool.connection_class(**pool.connection_kwargs)
    conn.connect()
    return conn


def ask(conn: AbstractConnection, *command: Any) -> Any:
    """Send one command on ``conn`` and read its reply (raw: no response callback)."""
    conn.send_command(*command)
    return conn.read_response()


def dropped(conn: AbstractConnection) -> bool:
    """Whether the server closed ``conn`` (or sent something unasked, which an idle link never gets): no round trip,
    one non-blocking read of the socket."""
    try:
        return bool(conn.can_read(0))
    except (redis.ConnectionError, OSError):
        return True
