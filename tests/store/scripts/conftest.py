"""The script tests run twice: on one Redis, and on a Redis Cluster (the slot proof of invariant 6 (docs/explanation/architecture.md)).

On the cluster every script runs on the node of its declared keys' slot.
redis-py refuses before sending a call whose declared KEYS span slots, and
Redis 7 refuses a script that touches a key of another node. A key of another
slot on the same node, though, it refuses only from a script that declares
flags: so here each script is sent with a ``#!lua`` first line (no flags; the
body unchanged), and then any key of another slot is an error (``Script
attempted to access keys that do not hash to the same slot``). A script test
that passes on the cluster thus proves that every key the script declares, and
every key it derives at run time on that path, hashes to the slot of the
queue's hash tag. ``EXECUTED`` records which scripts ran there; test_slots.py
checks that none was left out, after every other test (``pytest_collection_modifyitems``).

(The shipped scripts carry no shebang: with one, Redis refuses them whenever
memory is over ``maxmemory``, acks and reaps included, and Redis 6.2 cannot
read it.)
"""

from __future__ import annotations

from collections.abc import Iterator
from hashlib import sha1
from typing import Any

import pytest
import redis
from redis.cluster import ClusterPipeline, RedisCluster

from django_redisq import connection
from django_redisq.connection.topology import QueueCluster
from django_redisq.store import scripts
from tests.conftest import TOPOLOGY, topology_client, topology_settings

STRICT = "#!lua\n"
"""A shebang without flags: the script may touch keys of its declared slot only."""
_plain_source = scripts.source
BY_SHA = {sha1((STRICT + _plain_source(name)).encode()).hexdigest(): name for name in scripts.NAMES}
EXECUTED: set[str] = set()
"""The scripts that ran on the cluster without an error, in this session."""


COVERAGE_CHECK = "test_every_script_ran_on_the_cluster"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the cluster coverage check after every script test, whatever order the files were collected in."""
    last = [item for item in items if item.name == COVERAGE_CHECK]
    items[:] = [item for item in items if item.name != COVERAGE_CHECK] + last


def _recording(monkeypatch: pytest.MonkeyPatch) -> None:
    direct, queued = QueueCluster.execute_command, ClusterPipeline.execute_command

    def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = direct(self, *args, **kwargs)
        if args and args[0] == "EVALSHA" and args[1] in BY_SHA:
            EXECUTED.add(BY_SHA[args[1]])
        return out

    def queue(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and args[0] == "EVAL":  # a pipelined script (topology._ClusterScript); its errors raise at execute()
            EXECUTED.add(BY_SHA.get(sha1(str(args[1]).encode()).hexdigest(), "?"))
        return queued(self, *args, **kwargs)

    monkeypatch.setattr(scripts, "source", lambda name: STRICT + _plain_source(name))
    monkeypatch.setattr(QueueCluster, "execute_command", execute)
    monkeypatch.setattr(ClusterPipeline, "execute_command", queue)


CLUSTER_GROUP = "scripts_on_the_cluster"
"""Under pytest-xdist (``--dist loadgroup``) every cluster case of the scripts, and the coverage check after them, run
on one xdist worker: EXECUTED is that process's record, so the check sees every script the cases ran."""


@pytest.fixture(params=["single", pytest.param("cluster", marks=[pytest.mark.cluster, pytest.mark.xdist_group(CLUSTER_GROUP)])])
def r(request: pytest.FixtureRequest, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A plain client of one Redis, or of the session's cluster with TASKS pointing at it; empty before and after."""
    if request.param == "single":  # in a sentinel pass (make test-topologies), the master the sentinels name
        if TOPOLOGY == "cluster":
            pytest.skip("the cluster pass: the scripts run on the cluster in make test (the cluster parameter)")
        client: Any = topology_client(request) or redis.Redis.from_url(redis_url, decode_responses=True)
        client.flushall()
        yield client
        client.flushall()
        client.close()
        return
    cluster = request.getfixturevalue("redis_cluster")
    with topology_settings(REDIS_URL=cluster.url, CLUSTER=True):
        connection.reset()
        client = RedisCluster.from_url(cluster.url, decode_responses=True)
        client.flushall()  # every primary
        _recording(monkeypatch)
        yield client
        client.flushall()
        client.close()
    connection.reset()
