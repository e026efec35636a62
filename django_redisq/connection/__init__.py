"""Redis clients for one server, Sentinel or Cluster; sync and async side by side. The bottom layer.

* ``clients.py``: one sync client per connection target per process (our pools,
  ``CACHE_ALIAS``, the embedded server);
* ``topology.py``: what differs between one server, a Sentinel-watched master and a
  Cluster (the client class, the settings each honours, where a key lives);
* ``wire.py``: the sync fast path, a script call straight on a pooled socket;
* ``async_wire.py`` and ``async_pools.py``: the asyncio fast path, one pipelined
  socket per event loop and Redis.

Nothing here knows what a task is: the store (``django_redisq.store``) is the only
code above that talks to Redis, through these clients.
"""

from __future__ import annotations

import sys

from django_redisq.connection import clients, wire
from django_redisq.connection.clients import (
    BLOCK_TIMEOUT,
    get_client,
    heartbeat_budget,
    is_transient,
    pool_kwargs,
    retry_policy,
    target,
)
from django_redisq.connection.topology import describe

__all__ = ["BLOCK_TIMEOUT", "describe", "get_client", "heartbeat_budget",
           "is_transient", "pool_kwargs", "reset", "retry_policy", "target"]


def reset() -> None:
    """Forget every client of this process, sync and asyncio (tests, and after settings change).

    The asyncio registry is only loaded by code that runs an event loop; where it
    was never imported there is nothing of it to forget.
    """
    clients.forget()
    wire.close_all()
    async_pools = sys.modules.get("django_redisq.connection.async_pools")
    if async_pools is not None:
        async_pools.forget()
