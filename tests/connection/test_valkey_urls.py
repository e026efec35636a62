"""``valkey://`` and ``valkeys://`` URLs, at every door a ``redis://`` URL goes through.

The doors: the settings check (E006), the topology checks (E062, E067, W060),
the building of a pool (``clients.pool_kwargs``, which the async pools and the
Cluster and Sentinel clients are built from), the CLI (which reads TASKS), and
a real round trip (enqueue, run, result) on one server, a Cluster and through
sentinels, each reached by a ``valkey://`` URL.
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.core.management import call_command

from django_redisq import connection
from django_redisq.compat import TaskResultStatus, task_backends
from django_redisq.connection import async_pools, schemes
from django_redisq.settings.read import build_options, get_options, validate
from django_redisq.store.keys import QueueKeys
from django_redisq.worker.worker import Worker
from tests.conftest import topology_settings
from tests.testapp.tasks import add

SENTINEL = {"SENTINELS": [("10.0.0.1", 26379)], "SENTINEL_MASTER": "mymaster"}


def problems(options: dict[str, Any]) -> list[tuple[str, str]]:
    return [(cid, msg) for cid, msg, _ in validate("default", {"QUEUES": ["default"], "OPTIONS": options})]


@pytest.mark.parametrize("url", ["valkey://127.0.0.1:6379/0", "valkeys://:pw@cache.example.com:6380/2", "VALKEY://h/0",
                                 "redis://h/0", "rediss://h/0", "unix:///run/valkey.sock?db=1"])
def test_the_check_accepts_redis_and_valkey_urls(url):
    assert problems({"REDIS_URL": url}) == []


@pytest.mark.parametrize("url", ["http://h/0", "valkey+tls://h/0", "h:6379", 6379])
def test_the_check_refuses_another_scheme_and_names_both_servers(url):
    ((cid, msg),) = problems({"REDIS_URL": url})
    assert cid == "E006"
    assert all(s in msg for s in ("redis://", "rediss://", "valkey://", "valkeys://", "unix://")), msg


def test_the_topology_checks_read_valkey_urls_as_redis_urls():
    assert [c for c, _ in problems({"REDIS_URL": "valkey://10.0.0.1:7000/3", "CLUSTER": True})] == ["E062"]
    assert problems({"REDIS_URL": "valkey://10.0.0.1:7000/0", "CLUSTER": True}) == []
    assert [c for c, _ in problems({**SENTINEL, "REDIS_URL": "valkey://10.0.0.9:6379/0"})] == ["E067"]
    assert problems({**SENTINEL, "REDIS_URL": "valkeys://:pw@mymaster/0", "SENTINEL_KWARGS": {"ssl": True}}) == []
    from django_redisq.connection import topology

    (warning,) = topology.cautions("w", {**SENTINEL, "REDIS_URL": "valkeys://:pw@mymaster/0"})
    assert warning[0] == "W060" and "valkeys://" in warning[1]


def test_the_wire_url_is_the_redis_twin_and_leaves_the_rest_alone():
    assert schemes.wire_url("valkey://:p@h:1/2?x=y") == "redis://:p@h:1/2?x=y"
    assert schemes.wire_url("VALKEYS://h/0") == "rediss://h/0"
    assert schemes.wire_url("rediss://h/0") == "rediss://h/0"
    assert schemes.wire_url("unix:///s.sock") == "unix:///s.sock"


def test_a_pool_is_built_from_a_valkey_url_as_from_its_redis_twin():
    def built(url: str) -> dict[str, Any]:
        kwargs = connection.pool_kwargs(build_options("default", {"OPTIONS": {"REDIS_URL": url}}))
        return {k: v for k, v in kwargs.items() if k != "retry"}

    assert built("valkey://u:pw@10.0.0.1:7000/3") == built("redis://u:pw@10.0.0.1:7000/3")
    tls = built("valkeys://:pw@10.0.0.1:7000/0")
    assert tls == built("rediss://:pw@10.0.0.1:7000/0") and issubclass(tls["connection_class"], redis.SSLConnection)
    aio = async_pools.async_pool_kwargs(build_options("default", {"OPTIONS": {"REDIS_URL": "valkeys://:pw@h:7000/0"}}))
    assert aio["connection_class"].__name__ == "SSLConnection" and aio["host"] == "h" and aio["port"] == 7000


def valkey_url(url: str) -> str:
    """The same server, named the Valkey way."""
    assert url.startswith("redis://")
    return "valkey://" + url[len("redis://"):]


@pytest.fixture
def by_valkey_url(r: redis.Redis, redis_url: str) -> Iterator[str]:
    """TASKS on the session's server through a ``valkey://`` URL."""
    url = valkey_url(redis_url)
    with topology_settings(REDIS_URL=url):
        connection.reset()
        yield url
    connection.reset()


def test_enqueue_run_and_result_over_a_valkey_url(by_valkey_url, r):
    assert get_options().redis_url == by_valkey_url
    result = add.enqueue(2, 3)
    assert r.exists(QueueKeys("default").task(result.id))  # written to the server the URL names
    assert Worker(["default"], burst=True).run() == 1
    assert task_backends["default"].get_result(result.id).return_value == 5


def test_aenqueue_and_aget_result_over_a_valkey_url(by_valkey_url):
    async def go() -> Any:
        result = await add.aenqueue(4, 5)
        return result.id

    task_id = asyncio.run(go())
    assert Worker(["default"], burst=True).run() == 1
    assert asyncio.run(task_backends["default"].aget_result(task_id)).status == TaskResultStatus.SUCCESSFUL


def test_the_cli_reads_a_queue_over_a_valkey_url(by_valkey_url):
    add.enqueue(1, 1)
    add.enqueue(1, 2)
    out = io.StringIO()
    call_command("redisq", "stats", "--json", stdout=out)
    assert {row["queue"]: row["pending"] for row in json.loads(out.getvalue())}["default"] == 2


@pytest.mark.cluster
def test_a_cluster_reached_by_a_valkey_url(redis_cluster, r):
    from redis.cluster import RedisCluster

    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
    client.flushall()
    with topology_settings(REDIS_URL=valkey_url(redis_cluster.url), CLUSTER=True):
        connection.reset()
        try:
            result = add.enqueue(20, 22)
            assert Worker(["default"], burst=True).run() == 1
            assert task_backends["default"].get_result(result.id).return_value == 42
            assert client.exists(QueueKeys("default").task(result.id))
        finally:
            connection.reset()
            client.flushall()
            client.close()


@pytest.mark.sentinel
def test_a_sentinel_master_reached_by_a_valkey_url(redis_sentinel, r):
    master = redis.Redis(port=redis_sentinel.master_port(), decode_responses=True)
    master.flushall()
    with topology_settings(REDIS_URL=f"valkey://{redis_sentinel.master_name}/0", SENTINELS=redis_sentinel.sentinels,
                           SENTINEL_MASTER=redis_sentinel.master_name):
        connection.reset()
        try:
            result = add.enqueue(1, 2)
            assert Worker(["default"], burst=True).run() == 1
            assert task_backends["default"].get_result(result.id).return_value == 3
            assert master.exists(QueueKeys("default").task(result.id))
        finally:
            connection.reset()
            master.flushall()
            master.close()
