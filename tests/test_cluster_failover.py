"""A Redis Cluster master fails over during a run: producers and a runworker carry on (issue 15).

The session's 6-node cluster (tests/conftest.py ``redis_cluster``). Queue
``emails`` lives on one master M; a producer thread enqueues into it while a
real ``runworker`` subprocess drains it, and M's replica takes over:

* ``graceful``: ``CLUSTER FAILOVER`` on the replica (it catches up first, so
  nothing M acknowledged is lost), with and without DURABLE_REPLICAS 1;
* ``force``: M frozen by SIGSTOP, ``CLUSTER FAILOVER FORCE`` on the replica,
  then SIGCONT: M answers what it had buffered before it learns it was
  demoted, so acknowledged enqueues may be lost without durable mode. Measured
  and printed, not asserted.

Every enqueue that returned and is on the new master must run exactly once,
and nothing may be left pending, scheduled or processing. The failover is
undone (a graceful one back to M) in a ``finally`` so later cluster tests see
the cluster as it was.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from django_redisq import connection
from django_redisq.store.keys import QueueKeys
from django_redisq.testing import RedisServer, _call, _wait_for
from tests.conftest import topology_settings
from tests.helpers import wait_for
from tests.testapp import topology_tasks
from tests.testapp.topology_tasks import mark, runs

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
QUEUE = "emails"
FAST = {"HEARTBEAT_INTERVAL": 0.3, "WORKER_TIMEOUT": 3.0}
DURABLE = {"DURABLE_REPLICAS": 1, "DURABLE_TIMEOUT": 0.5}


@pytest.fixture
def cluster(redis_cluster: Any, r: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisCluster]:
    """The session cluster, emptied around the test; effects go to the single (steady) Redis."""
    monkeypatch.setattr(topology_tasks, "EFFECTS_URL", redis_url)
    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
    client.flushall()
    yield client
    connection.reset()
    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)  # the topology may have moved meanwhile
    client.flushall()
    client.close()


def _role(port: int) -> str:
    return next((line.split(":", 1)[1].strip() for line in _call(port, "info", "replication").splitlines()
                 if line.startswith("role:")), "")


def master_and_replica(redis_cluster: Any, client: RedisCluster, key: str) -> tuple[RedisServer, RedisServer]:
    """The nodes (RedisServer) of the master holding ``key``'s slot and of its replica."""
    by_port = {n.port: n for n in redis_cluster.nodes}
    master = by_port[int(client.get_node_from_key(key).port)]
    info = _call(master.port, "info", "replication")
    replica_port = next(int(part.split("=")[1]) for line in info.splitlines() if line.startswith("slave0:")
                        for part in line.split(":", 1)[1].split(",") if part.startswith("port="))
    return master, by_port[replica_port]


def fail_over(to: RedisServer, frm: RedisServer, force: bool = False) -> None:
    """``to`` (a replica of ``frm``) becomes the master; ``frm`` is left its replica once it answers."""
    out = _call(to.port, "cluster", "failover", *(["force"] if force else []))
    assert "OK" in out, out
    _wait_for(f"port {to.port} to be master", lambda: _role(to.port) == "master", 15)


def settled(redis_cluster: Any, master: RedisServer, replica: RedisServer) -> bool:
    """``master`` is a master with ``replica`` in sync, and every node says cluster_state:ok."""
    return (_role(master.port) == "master" and "master_link_status:up" in _call(replica.port, "info", "replication")
            and all("cluster_state:ok" in _call(n.port, "cluster", "info") for n in redis_cluster.nodes))


def restore(redis_cluster: Any, master: RedisServer, replica: RedisServer) -> None:
    """Back to ``master`` as master of its slots (a graceful failover back, once it is in sync)."""
    if master.proc is not None:
        os.kill(master.proc.pid, signal.SIGCONT)  # harmless if it was not stopped
    deadline = time.monotonic() + 60  # a promotion still under way (a forced one on a loaded machine) may land late
    while not settled(redis_cluster, master, replica):
        if time.monotonic() > deadline:
            raise RuntimeError("timed out after 60 s waiting for the cluster back as it was")
        if _role(master.port) != "master" and "master_link_status:up" in _call(master.port, "info", "replication"):
            fail_over(master, replica)
        time.sleep(0.2)


def worker_env(redis_cluster: Any, redis_url: str, durable: bool) -> dict[str, str]:
    env = {"REDISQ_TEST_CLUSTER": "1", "REDISQ_TEST_EFFECTS_URL": redis_url, "REDISQ_TEST_REDIS_URL": redis_cluster.url,
           **{f"REDISQ_OPT_{k}": str(v) for k, v in FAST.items()}}
    if durable:
        env.update(REDISQ_TEST_DURABLE_REPLICAS="1", REDISQ_OPT_DURABLE_TIMEOUT=str(DURABLE["DURABLE_TIMEOUT"]))
    return env


def leftovers(client: RedisCluster, queue: str) -> dict[str, int]:
    k = QueueKeys(queue)
    return {"pending": client.llen(k.pending), "scheduled": client.zcard(k.scheduled),
            "processing": sum(client.llen(key) for key in client.scan_iter(match=k.processing("*")))}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", [
    "graceful-durable",  # store/durable.py follows redis-py's MovedError (its text has no "MOVED ") to the new master
    "graceful",
    # a forced failover of a SIGSTOPped master: it measures what asynchronous replication can lose (0 or 1 of
    # 300 here); promotion under CI load took longer than 30 s once in 4 runs, so it runs when asked for
    pytest.param("force", marks=pytest.mark.skipif(not os.environ.get("REDISQ_TEST_FORCED_FAILOVER"),
                                                   reason="set REDISQ_TEST_FORCED_FAILOVER=1 to run it")),
])
def test_a_master_fails_over_during_a_run(mode, cluster, redis_cluster, redis_url, run_worker_process):
    durable, force = mode.endswith("durable"), mode == "force"
    master, replica = master_and_replica(redis_cluster, cluster, QueueKeys(QUEUE).pending)
    _wait_for("the replica in sync", lambda: settled(redis_cluster, master, replica), 20)  # a fresh cluster: not yet
    n, failover_at = 300, 100
    acked: list[tuple[str, str]] = []  # (id, key) of every enqueue that returned
    refused: dict[str, int] = {}
    marks: dict[str, float] = {}

    def produce() -> None:
        for i in range(n):
            if i == failover_at:
                marks["failover"] = time.monotonic()
                if force:
                    assert master.proc is not None
                    os.kill(master.proc.pid, signal.SIGSTOP)
                    threading.Timer(1.5, os.kill, (master.proc.pid, signal.SIGCONT)).start()
                threading.Thread(target=fail_over, args=(replica, master, force), daemon=True).start()
            try:
                acked.append((mark.using(queue_name=QUEUE).enqueue(f"fo{i}").id, f"fo{i}"))
                if "failover" in marks and "back" not in marks:
                    marks["back"] = time.monotonic()  # the first enqueue acknowledged once the failover began
            except redis.RedisError as exc:  # not acknowledged: the caller knows
                refused[type(exc).__name__] = refused.get(type(exc).__name__, 0) + 1
                time.sleep(0.05)
            time.sleep(0.004)

    with topology_settings(REDIS_URL=redis_cluster.url, CLUSTER=True, **FAST, **(DURABLE if durable else {})):
        connection.reset()
        worker = run_worker_process(QUEUE, "--concurrency", "4", "--name", f"fo-{mode}", env=worker_env(redis_cluster, redis_url, durable))
        producer = threading.Thread(target=produce, daemon=True)
        try:
            mark.using(queue_name=QUEUE).enqueue("fo-warmup")
            if not wait_for(lambda: "fo-warmup" in runs(), 30):
                pytest.fail(f"the worker ran nothing: {worker.output()[-2000:]}")
            producer.start()
            producer.join(90)
            assert not producer.is_alive(), "the producer hung"
            assert wait_for(lambda: _role(replica.port) == "master", 30), "the replica was not promoted"  # a loaded machine is slow
            connection.reset()
            client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
            lost = [k for i, k in acked if not client.exists(QueueKeys(QUEUE).task(i))]
            present = {k for _, k in acked} - set(lost)
            finished = wait_for(lambda: present <= set(runs()) and not any(leftovers(client, QUEUE).values()), 40)
            left = leftovers(client, QUEUE)
            alive = worker.proc.poll() is None
        finally:
            worker.proc.send_signal(signal.SIGTERM)
            tail = worker.output()[-3000:]
            connection.reset()
            restore(redis_cluster, master, replica)
    done = runs()
    twice = sorted(k for k in present if done.get(k, 0) > 1)
    report = (f"cluster {mode} failover: {len(acked)} enqueues acknowledged, refused {refused or 'none'}, "
              f"{len(lost)} acknowledged but lost, {len(twice)} ran twice, left {left}, producers back "
              + (f"{marks['back'] - marks['failover']:.2f} s after the failover began" if "back" in marks else "never"))
    print("\n" + report)
    assert alive, f"the worker died: {report}\n{tail}"
    assert len(acked) >= n - 20 and "back" in marks, report  # the producer carried on through the redirect
    assert finished and not any(left.values()), f"{report}\n{tail}"
    assert not twice, report  # no crash: nothing explains a second run
    if not force or durable:
        assert not lost, report
