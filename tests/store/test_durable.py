"""Durable mode (DURABLE_REPLICAS): what enqueue and the settle steps returned for is on a replica too.

Real servers, no mocks: the session's master + replica + 3 sentinels (tests/conftest.py
``redis_sentinel``), reached through the sentinels and directly (one server: the
line and the async channel's own socket); the session's cluster; and, for the
failover, a setup of its own with two replicas (the failover leaves the session's
setup as it was). "The replica is down" is its process stopped by SIGSTOP (its
connection stays open, so the master still counts it and waits for it), resumed
by SIGCONT in a ``finally``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
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
from django_redisq.compat import TaskResultStatus, task_backends
from django_redisq.exceptions import NotDurable, RedisUnavailable
from django_redisq.settings.read import get_options, validate
from django_redisq.store.keys import QueueKeys
from django_redisq.testing import RedisServer, SentinelSetup, find_redis_server, redis_cli, wait_until
from django_redisq.worker.worker import Worker
from tests.conftest import topology_settings
from tests.helpers import failover_run, wait_for
from tests.testapp import topology_tasks
from tests.testapp.topology_tasks import mark, runs

FAST = {"HEARTBEAT_INTERVAL": 0.5, "WORKER_TIMEOUT": 3.0}
DURABLE = {"DURABLE_REPLICAS": 1, "DURABLE_TIMEOUT": 0.3}


@contextlib.contextmanager
def stopped(server: RedisServer) -> Iterator[None]:
    """``server``'s process frozen (SIGSTOP) for the block, resumed (SIGCONT) whatever happens."""
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)


def _client(port: int) -> redis.Redis:
    return redis.Redis(port=port, decode_responses=True)


def _codes(options: dict[str, Any]) -> list[str]:
    return [c for c, _, _ in validate("default", {"OPTIONS": {"REDIS_URL": "redis://127.0.0.1:6379/0", **options}})]


def test_checks_refuse_bad_values():
    assert _codes({"DURABLE_REPLICAS": 1, "DURABLE_TIMEOUT": 0.5}) == []
    assert _codes({"DURABLE_REPLICAS": 0}) == []
    for bad in (-1, 1.5, "1", True, 101):
        assert _codes({"DURABLE_REPLICAS": bad}) == ["E068"], bad
    for bad in (0, -0.5, float("nan"), float("inf"), 11, "0.5", True, 0.0001):
        assert _codes({"DURABLE_REPLICAS": 1, "DURABLE_TIMEOUT": bad}) == ["E069"], bad
    embedded = validate("default", {"OPTIONS": {"EMBEDDED": True, "DURABLE_REPLICAS": 1}})
    assert "E070" in [c for c, _, _ in embedded]
    assert get_options().durable_replicas == 0  # off by default


@pytest.fixture(params=["sentinel", "direct"])
def durable(request: pytest.FixtureRequest, redis_sentinel: SentinelSetup, r: Any, redis_url: str,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[SentinelSetup]:
    """TASKS in durable mode on the session's master + replica: through the sentinels, or at the master's address."""
    monkeypatch.setattr(topology_tasks, "EFFECTS_URL", redis_url)
    if redis_sentinel.master_port() != redis_sentinel.master.port:  # a failover test ran first (tests/topologies/test_sentinel.py)
        redis_sentinel.restore(fail_back=False)
    _client(redis_sentinel.master.port).flushall()
    where = ({"REDIS_URL": f"redis://{redis_sentinel.master_name}/0", "SENTINELS": redis_sentinel.sentinels,
              "SENTINEL_MASTER": redis_sentinel.master_name} if request.param == "sentinel"
             else {"REDIS_URL": redis_sentinel.master.url})
    with topology_settings(**where, **DURABLE, **FAST):
        connection.reset()
        yield redis_sentinel
    connection.reset()


@pytest.mark.sentinel
def test_durable_enqueue_is_on_the_replica_when_it_returns(durable):
    before = _client(durable.master.port).info("commandstats").get("cmdstat_wait", {}).get("calls", 0)
    result = mark.enqueue("d1")
    many = mark.enqueue_many([(("d2",), {}), (("d3",), {})])
    replica = _client(durable.replica.port)
    for task_id in (result.id, *(m.id for m in many)):  # no waiting here: WAIT already did
        assert replica.exists(QueueKeys("default").task(task_id))
    assert _client(durable.master.port).info("commandstats")["cmdstat_wait"]["calls"] >= before + 2  # (+1 after a NOSCRIPT)


@pytest.mark.sentinel
def test_stopped_replica_makes_enqueue_raise_within_the_timeout(durable):
    master = _client(durable.master.port)
    with stopped(durable.replica):
        t = time.monotonic()
        with pytest.raises(NotDurable) as info:
            mark.enqueue("nd")
        took = time.monotonic() - t
        with pytest.raises(NotDurable):
            mark.enqueue_many([(("nd2",), {}), (("nd3",), {})])
    exc = info.value
    assert 0.3 <= took < 2.0, took  # WAIT's 0.3 s, then the error: about 0.31 s measured, a hang would not end
    assert isinstance(exc, RedisUnavailable) and isinstance(exc, redis.RedisError)
    assert (exc.acked, exc.wanted, exc.timeout) == (0, 1, 0.3)
    text = str(exc)
    assert f"enqueue of task {exc.task_ids[0]} stored on the Redis master" in text
    assert "only 0 of 1 replica(s) acknowledged it within 0.3 s" in text and "may or may not survive a failover" in text
    assert master.exists(QueueKeys("default").task(exc.task_ids[0]))  # it IS stored ...
    assert wait_for(lambda: _client(durable.replica.port).exists(QueueKeys("default").task(exc.task_ids[0])), 5)  # ... and catches up
    assert mark.enqueue("after").id  # and durable enqueues go on once the replica is back


@pytest.mark.sentinel
def test_stopped_replica_makes_aenqueue_raise(durable):
    async def go() -> Any:
        ok = await mark.aenqueue("a1")
        with stopped(durable.replica):
            t = time.monotonic()
            with pytest.raises(NotDurable) as info:
                await mark.aenqueue("a2")
            took = time.monotonic() - t
            # a group commit: concurrent calls that go in one round trip all raise
            group = await asyncio.gather(*(mark.aenqueue(f"g{i}") for i in range(5)), return_exceptions=True)
        return ok, info.value, took, group

    ok, exc, took, group = asyncio.run(go())
    assert _client(durable.replica.port).exists(QueueKeys("default").task(ok.id))
    assert 0.3 <= took < 2.0 and "0 of 1 replica(s)" in str(exc)
    assert all(isinstance(g, NotDurable) for g in group), group
    assert _client(durable.master.port).exists(QueueKeys("default").task(exc.task_ids[0]))


@pytest.mark.sentinel
def test_an_ack_the_replica_missed_is_retried_until_it_has_it(durable, caplog):
    result = mark.enqueue("ack")
    worker = Worker(["default"], burst=True, concurrency=1)
    done: list[int] = []
    caplog.set_level(logging.WARNING, "django_redisq")
    with stopped(durable.replica):
        serving = threading.Thread(target=lambda: done.append(worker.run()), daemon=True)
        serving.start()
        assert wait_for(lambda: runs().get("ack") == 1, 10)

        def retried() -> int:  # the ack's WAITs that timed out, each logged before the next
            return sum("NotDurable" in r.getMessage() and "retrying" in r.getMessage()
                       for r in list(caplog.records) if r.levelno == logging.WARNING)

        assert wait_for(lambda: retried() >= 3, 15), caplog.text  # three WAITs that timed out ...
        assert not done, "the ack was taken as done while the replica had not acknowledged it"  # ... and still waiting
    serving.join(10)
    assert done == [1]
    assert runs() == {"ack": 1}
    assert task_backends["default"].get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    assert not any("no longer held" in r.getMessage() for r in caplog.records)  # the ack was not sent twice


@pytest.mark.cluster
def test_durable_enqueue_and_ack_on_the_cluster(redis_cluster: Any, r: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(topology_tasks, "EFFECTS_URL", redis_url)
    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
    client.flushall()
    try:
        with topology_settings(REDIS_URL=redis_cluster.url, CLUSTER=True, **DURABLE, **FAST):
            connection.reset()
            primary = client.get_node_from_key(QueueKeys("default").pending)
            assert wait_for(lambda: "state=online" in redis_cli(primary.port, "info", "replication"), 20), "the replica never synced"
            result = mark.enqueue("c1")
            aresult = asyncio.run(mark.aenqueue("c2"))
            key = QueueKeys("default").task(result.id)
            info = _client(primary.port).info("replication")["slave0"]  # the primary's replica
            replica = _client(int(info["port"]))
            replica.execute_command("READONLY")
            assert replica.exists(key) and replica.exists(QueueKeys("default").task(aresult.id))  # at once: WAIT did it
            assert Worker(["default"], burst=True).run() == 2
            assert task_backends["default"].get_result(result.id).status == TaskResultStatus.SUCCESSFUL
            assert replica.hget(key, "state") == client.hget(key, "state")
    finally:
        connection.reset()
        client.flushall()
        client.close()


@pytest.mark.cluster
def test_a_durable_step_follows_a_slot_that_moves_twice_to_a_node_without_the_script(redis_cluster: Any):
    """While a failover propagates, the refreshed slot map may still be stale: MOVED, MOVED again, then NOSCRIPT there."""
    from django_redisq.store.scripts import durable

    client = RedisCluster.from_url(redis_cluster.url, decode_responses=True)
    try:
        key, source = "{redirects}:k", "return redis.call('SET', KEYS[1], ARGV[1])"
        sha = client.script_load(source)
        client.script_flush()  # every node forgets it: the node the slot lands on must load it
        slot, right = client.keyslot(key), client.get_node_from_key(key)
        wrong = next(n for n in client.get_primaries() if n.name != right.name)
        manager, initialize, stale = client.nodes_manager, client.nodes_manager.initialize, [2]

        def refresh() -> None:  # the first refresh learns a map as stale as before
            initialize()
            if stale[0] > 1:
                manager.slots_cache[slot] = [wrong]
            stale[0] -= 1

        manager.slots_cache[slot] = [wrong]
        manager.initialize = refresh  # type: ignore[method-assign]
        options = dataclasses.replace(get_options("default"), durable_replicas=1, durable_timeout=2.0)
        assert wait_for(lambda: "state=online" in redis_cli(int(right.port), "info", "replication"), 20), "the replica never synced"
        assert durable.call(client, options, sha, source, [key], ["v"], lambda: "the step", settle=False) == "OK"
        assert stale[0] == 0  # two redirects were followed
        assert client.get(key) == "v"
    finally:
        client.nodes_manager.initialize = initialize  # type: ignore[method-assign]
        client.flushall()
        client.close()


class TwoReplicas(SentinelSetup):
    """A master, two replicas, three sentinels: after a failover the promoted replica still has one, so durable writes go on."""

    def __init__(self) -> None:
        super().__init__(find_redis_server("path"))
        self.second = RedisServer(self.binary, None, "--replicaof", "127.0.0.1", str(self.master.port))

    def start(self) -> TwoReplicas:
        self.second.start()  # it connects once the master is up; the sentinels find it in the master's INFO
        super().start()
        wait_until("the sentinels to know both replicas", lambda: all(
            f"\n{self.second.port}\n" in redis_cli(p, "sentinel", "replicas", self.master_name) for p in self.sentinel_ports), 20)
        return self

    def cleanup(self) -> None:
        super().cleanup()
        self.second.cleanup()


@pytest.mark.sentinel
def test_sigkilled_master_loses_no_durable_enqueue(redis_url: str, r: Any, monkeypatch: pytest.MonkeyPatch):
    """Every enqueue that returned is on the promoted replica and runs; the refused ones are counted."""
    if not find_redis_server("path"):
        pytest.skip("no redis-server on PATH")
    monkeypatch.setattr(topology_tasks, "EFFECTS_URL", redis_url)
    with TwoReplicas() as setup, topology_settings(REDIS_URL=f"redis://{setup.master_name}/0", SENTINELS=setup.sentinels,
                                                    SENTINEL_MASTER=setup.master_name, **DURABLE, **FAST):
        connection.reset()
        try:
            with failover_run(lambda: setup.master.stop(signal.SIGKILL), lambda key: mark.enqueue(key, 0.002),
                              n=200, kill_at=60, gap=0.003, hang_after=90) as run:
                port = setup.master_port()
                assert port in (setup.replica.port, setup.second.port), "the sentinels did not promote a replica"
                new_master = _client(port)
                lost = [k for i, k, _ in run.acked if not new_master.exists(QueueKeys("default").task(i))]
                backend = task_backends["default"]
                finished = wait_for(lambda: all(backend.get_result(i).status == TaskResultStatus.SUCCESSFUL
                                                for i, _, _ in run.acked), 40)
        finally:
            connection.reset()
    done = runs()
    report = run.report("durable failover", lost)
    print("\n" + report)
    assert run.back_at is not None and run.back_at - run.killed_at < 15, report
    assert not lost, report
    assert finished and all(done.get(k, 0) >= 1 for _, k, _ in run.acked), f"an acknowledged task did not run; {report}"
    assert sum(run.refused.values()) >= 1, report  # the outage was seen
