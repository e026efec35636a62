"""The topology passes (``make test-topologies``) really run on the topology they name.

With ``REDISQ_TEST_TOPOLOGY=cluster`` or ``sentinel`` the worker and invariant
tests run against the session's Redis Cluster or sentinel setup (tests/conftest.py).
This test fails if such a pass quietly ran on the single server instead: the
backend's client must be of that topology, and a task enqueued and run must
have been stored there and nowhere on the single server.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from django_redisq import connection
from django_redisq.settings.read import get_options
from django_redisq.store.keys import QueueKeys
from tests.conftest import TOPOLOGY
from tests.testapp import tasks

pytestmark = pytest.mark.skipif(TOPOLOGY == "single", reason="REDISQ_TEST_TOPOLOGY names no topology: the default run")


def test_the_backend_and_the_workers_use_the_named_topology(r: Any, redis_url: str, make_worker: Any) -> None:
    client = connection.get_client(get_options("default"))
    if TOPOLOGY == "cluster":
        assert isinstance(client, RedisCluster) and isinstance(r, RedisCluster)
    else:
        assert isinstance(client.connection_pool, redis.sentinel.SentinelConnectionPool)
    single = redis.Redis.from_url(redis_url, decode_responses=True)
    single.flushall()
    result = tasks.add.enqueue(2, 3)
    assert r.exists(QueueKeys("default").task(result.id))
    assert make_worker("default").run() == 1
    assert result.refresh() is None and result.return_value == 5
    assert single.dbsize() == 0, "the pass stored something on the single server"
