"""A Redis Cluster master fails over during a run: producers and a runworker carry on (issue 15).

The session's 6-node cluster (tests/conftest.py ``redis_cluster``). Queue
``emails`` lives on one master M; a producer thread enqueues into it while a
real ``runworker`` subprocess drains it, and M's replica takes over:

* ``graceful``: ``CLUSTER FAILOVER`` on the replica (it catches up first, so
  nothing M acknowledged is lost), with and without DURABLE_REPLICAS 1;
* ``force``: M frozen by SIGSTOP, ``CLUSTER FAILOVER FORCE`` on the replica,
  then SIGCONT once the replica won: M answers what it had buffered before it
  learns it was demoted, so without durable mode acknowledged enqueues may be
  lost, and a task whose fetch or ack M had not replicated when it froze may
  run again. Measured and printed, not asserted (but only a task enqueued
  before the freeze may run twice).

Every enqueue that returned and is on the new master must run, exactly once
but for the forced case above, and nothing may be left pending, scheduled or
processing. The failover is undone (a graceful one back to M) in a ``finally``
so later cluster tests see the cluster as it was.

The cases ask the same replica to fail over within seconds of each other, and
Redis 7.0 keeps a replica's election state for 4 x cluster-node-timeout: asked
again within 2 x of its last election it reuses that election's votes
(redis/redis#8752), is master at its old configEpoch for a few tens of
milliseconds, and the slots' owner with the higher epoch demotes it again;
asked between 2 x and 4 x, it holds the request back until the 4 x have passed.
Masters also refuse to vote about a master within 2 x of their last vote about
it. So ``fail_over`` counts a promotion only once every node agrees on it,
retries one that did not stick, and first waits out 4 x cluster-node-timeout
since the last election it asked of that node (the tests wait it out before
their producer starts, so the failover still lands during the run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from django_redisq import connection
from django_redisq.store.keys import QueueKeys
from django_redisq.testing import RedisServer, redis_cli, wait_until
from tests.conftest import topology_settings
from tests.helpers import wait_for
from tests.testapp.topology_tasks import mark, runs

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
QUEUE = "emails"
FAST = {"HEARTBEAT_INTERVAL": 0.3, "WORKER_TIMEOUT": 3.0}
DURABLE = {"DURABLE_REPLICAS": 1, "DURABLE_TIMEOUT": 0.5}


@pytest.fixture
def cluster_options() -> dict[str, Any]:
    """Heartbeats a little slower than the directory's: a worker waiting out an election is not reaped."""
    return FAST


def master_and_replica(redis_cluster: Any, client: RedisCluster, key: str) -> tuple[RedisServer, RedisServer]:
    """The nodes (RedisServer) of the master holding ``key``'s slot and of its replica."""
    by_port = {n.port: n for n in redis_cluster.nodes}
    master = by_port[int(client.get_node_from_key(key).port)]
    info = redis_cli(master.port, "info", "replication")
    replica_port = next(int(part.split("=")[1]) for line in info.splitlines() if line.startswith("slave0:")
                        for part in line.split(":", 1)[1].split(",") if part.startswith("port="))
    return master, by_port[replica_port]


MF_TIMEOUT = 5.0
"""Seconds a Redis manual failover (CLUSTER FAILOVER [FORCE]) may take before the replica gives it up."""
_elections: dict[int, float] = {}
"""Port -> time.monotonic() by which the node's last election (one this module asked for) was over."""


def node_timeout(node: RedisServer) -> float:
    """The node's cluster-node-timeout in seconds (tests/conftest.py's cluster: 2 s)."""
    return int(redis_cli(node.port, "config", "get", "cluster-node-timeout").split()[1]) / 1000


def cluster_nodes(port: int) -> dict[int, tuple[str, set[str], str, int, bool]] | None:
    """The node's CLUSTER NODES by port: (id, flags, master id, config epoch, holds slots); None if it does not
    answer (a SIGSTOPped master)."""
    try:
        out = redis_cli(port, "cluster", "nodes")
    except subprocess.TimeoutExpired:
        return None
    view = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 8:
            addr = f[1].split("@")[0].split(",")[0]
            view[int(addr.rsplit(":", 1)[1])] = (f[0], set(f[2].split(",")), f[3], int(f[6]), len(f) > 8)
    return view or None


def agreed(redis_cluster: Any, master: RedisServer, replica: RedisServer) -> bool:
    """Every node, ``master`` and ``replica`` included, shows ``master`` holding its slots at one configEpoch and
    ``replica`` as its replica.

    A promotion that will not stick never gets this far: slots go only to a higher configEpoch, so the old
    master (and every node) lists itself as the new master's replica only once the new master won a real
    election; one ``role:master`` sample on the new master proves nothing (redis/redis#8752)."""
    epochs = set()
    for node in redis_cluster.nodes:
        view = cluster_nodes(node.port)
        if view is None or master.port not in view or replica.port not in view:
            return False
        (master_id, flags, _, epoch, slots), (_, replica_flags, replica_of, _, _) = view[master.port], view[replica.port]
        if "master" not in flags or not slots or any(f.startswith("fail") for f in flags):
            return False
        if "slave" not in replica_flags or replica_of != master_id:
            return False
        epochs.add(epoch)
    return len(epochs) == 1


def wait_out_last_election(node: RedisServer) -> None:
    """Sleep until 4 x cluster-node-timeout have passed since ``node``'s last election (none if it had none here).

    Redis 7.0 keeps a replica's election state that long: within it a new CLUSTER FAILOVER reuses the old
    election's votes or is held back, and the masters still refuse to vote about its master (the one it
    replaced in that election, the master it fails over from now in a one-replica shard)."""
    since = _elections.get(node.port)
    if since is not None:
        time.sleep(max(0.0, since + 4 * node_timeout(node) - time.monotonic()))


def fail_over(redis_cluster: Any, to: RedisServer, frm: RedisServer, force: bool = False, timeout: float = 60) -> int:
    """``to`` (a replica of ``frm``) becomes the master, and every node agrees; the number of CLUSTER FAILOVERs accepted.

    Each attempt waits out ``to``'s last election first, then up to the manual failover timeout (plus
    2 x cluster-node-timeout for the news to spread) for ``agreed``; one that does not stick is asked again.
    Nothing is asked of ``frm`` before the first attempt: in the forced case it is SIGSTOPped."""
    deadline, attempts = time.monotonic() + timeout, 0
    while True:
        wait_out_last_election(to)
        answer = redis_cli(to.port, "cluster", "failover", *(["force"] if force else [])).strip()
        if "OK" in answer:
            attempts += 1
            stuck = wait_for(lambda: agreed(redis_cluster, to, frm), MF_TIMEOUT + 2 * node_timeout(to), 0.1)
            _elections[to.port] = time.monotonic()  # any election this attempt started is over by now
            if stuck:
                return attempts
        elif agreed(redis_cluster, to, frm):  # already the master: an earlier attempt's promotion landed late
            return attempts
        else:  # nothing started (say, a graceful one while the link to frm is down), or not agreed yet
            time.sleep(0.5)
        if time.monotonic() > deadline:
            raise RuntimeError(f"port {to.port} was not promoted over port {frm.port} within {timeout:g} s "
                               f"({attempts} CLUSTER FAILOVER(s) accepted, last answer {answer!r})")


def claimed(to: RedisServer, frm: RedisServer) -> bool:
    """``to`` itself says it holds its slots as master at a configEpoch above ``frm``'s: it won a real election."""
    view = cluster_nodes(to.port)
    if view is None or to.port not in view or frm.port not in view:
        return False
    (_, flags, _, epoch, slots), (_, _, _, frm_epoch, _) = view[to.port], view[frm.port]
    return "master" in flags and slots and epoch > frm_epoch


def thaw(frozen: RedisServer, replica: RedisServer) -> None:
    """SIGCONT for the SIGSTOPped ``frozen`` once ``replica`` claimed its slots (10 s at most).

    So the forced promotion happens while the old master is frozen even on a loaded machine, which is what the
    case measures: what the old master acknowledged but had not replicated yet. The claim is the event the freeze
    waits for; no wall-time floor is added to it (the promotion, not the length of the freeze, is the point)."""
    wait_for(lambda: claimed(replica, frozen), 10, 0.05)
    assert frozen.proc is not None
    os.kill(frozen.proc.pid, signal.SIGCONT)


def replicating(master: RedisServer) -> bool:
    """A write on ``master`` (in QUEUE's slot) reaches its replica within 0.2 s (WAIT 1), as a durable write needs.

    After a full resync the replica says master_link_status:up once it loaded the RDB, but the master streams
    it commands only from the replica's next REPLCONF ACK, up to a second later: a DURABLE_REPLICAS enqueue in
    between times out (the first case, on a fresh session cluster)."""
    key = f"redisq:{{{QUEUE}}}:failover-probe"
    try:
        with redis.Redis(port=master.port, socket_timeout=2) as client:
            pipe = client.pipeline(transaction=False)
            pipe.set(key, 1).wait(1, 200).delete(key)
            return pipe.execute()[1] >= 1
    except redis.RedisError:  # not the slot's master (yet)
        return False


def settled(redis_cluster: Any, master: RedisServer, replica: RedisServer) -> bool:
    """``master`` is the master, every node agrees, ``replica`` is in sync and every node says cluster_state:ok."""
    return (agreed(redis_cluster, master, replica)
            and "master_link_status:up" in redis_cli(replica.port, "info", "replication")
            and all("cluster_state:ok" in redis_cli(n.port, "cluster", "info") for n in redis_cluster.nodes)
            and replicating(master))


def restore(redis_cluster: Any, master: RedisServer, replica: RedisServer) -> None:
    """Back to ``master`` as master of its slots (a graceful failover back, once it is in sync)."""
    if master.proc is not None:
        os.kill(master.proc.pid, signal.SIGCONT)  # harmless if it was not stopped
    deadline = time.monotonic() + 90  # a promotion still under way (a forced one on a loaded machine) may land late
    while not settled(redis_cluster, master, replica):
        if time.monotonic() > deadline:
            raise RuntimeError("timed out after 90 s waiting for the cluster back as it was")
        if agreed(redis_cluster, replica, master) and "master_link_status:up" in redis_cli(master.port, "info", "replication"):
            fail_over(redis_cluster, master, replica)
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


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", [
    "graceful-durable",  # store/scripts/durable.py follows redis-py's MovedError (its text has no "MOVED ") to the new master
    "graceful",
    "force",  # a forced failover of a SIGSTOPped master: it measures what asynchronous replication can lose
])
def test_a_master_fails_over_during_a_run(mode, cluster, redis_cluster, redis_url, run_worker_process):
    """Enqueues go on through the failover and each acknowledged one still on the new master runs exactly once.

    The cases fail the same shard over one after another, so each first waits out the replica's election in the
    case before (``wait_out_last_election``), and the producer goes on until ``fail_over`` saw the promotion stick:
    the failover lands during the run whatever it took, and a failed one fails the test, not a later wait."""
    durable, force = mode.endswith("durable"), mode == "force"
    master, replica = master_and_replica(redis_cluster, cluster, QueueKeys(QUEUE).pending)
    wait_until("the replica in sync", lambda: settled(redis_cluster, master, replica), 20)  # a fresh cluster: not yet
    n, failover_at = 300, 100
    acked: list[tuple[str, str]] = []  # (id, key) of every enqueue that returned
    refused: dict[str, int] = {}
    marks: dict[str, float] = {}
    promoted: list[int] = []  # the CLUSTER FAILOVERs it took
    failed: list[Exception] = []

    def failover() -> None:
        """``fail_over`` in the background; the test thread reports its outcome."""
        try:
            promoted.append(fail_over(redis_cluster, replica, master, force))
            marks["promoted"] = time.monotonic()
        except (RuntimeError, subprocess.SubprocessError) as exc:
            failed.append(exc)

    failing_over = threading.Thread(target=failover, daemon=True)

    def produce() -> None:
        """n enqueues, and on until the failover is over: enqueues reach the new master whatever it took."""
        i = 0
        while i < n or failing_over.is_alive():
            if i == failover_at:
                marks["failover"] = time.monotonic()
                if force:
                    assert master.proc is not None
                    os.kill(master.proc.pid, signal.SIGSTOP)
                    threading.Thread(target=thaw, args=(master, replica), daemon=True).start()
                failing_over.start()
            try:
                acked.append((mark.using(queue_name=QUEUE).enqueue(f"fo{i}").id, f"fo{i}"))
                if "failover" in marks and "back" not in marks:
                    marks["back"] = time.monotonic()  # the first enqueue acknowledged once the failover began
            except redis.RedisError as exc:  # not acknowledged: the caller knows
                refused[type(exc).__name__] = refused.get(type(exc).__name__, 0) + 1
                time.sleep(0.05)
            time.sleep(0.004)
            i += 1

    with topology_settings(REDIS_URL=redis_cluster.url, CLUSTER=True, **FAST, **(DURABLE if durable else {})):
        connection.reset()
        worker = run_worker_process(QUEUE, "--concurrency", "4", "--name", f"fo-{mode}", env=worker_env(redis_cluster, redis_url, durable))
        producer = threading.Thread(target=produce, daemon=True)
        try:
            mark.using(queue_name=QUEUE).enqueue("fo-warmup")
            # a condition, not a time: a worker starting on a loaded machine may take long to run its first task
            if not wait_for(lambda: "fo-warmup" in runs(), 120):
                pytest.fail(f"the worker ran nothing: {worker.printed()[-2000:]}")
            wait_out_last_election(replica)  # the previous case's election: else this failover may not stick
            producer.start()
            producer.join(120)
            assert not producer.is_alive(), "the producer hung"
            assert promoted, f"the replica was not promoted: {failed}"
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
              f"{len(lost)} acknowledged but lost, {len(twice)} ran twice, left {left}, promoted "
              f"{marks['promoted'] - marks['failover']:.2f} s after the failover began ({promoted[0]} CLUSTER "
              f"FAILOVER(s)), producers back "
              + (f"{marks['back'] - marks['failover']:.2f} s after the failover began" if "back" in marks else "never"))
    print("\n" + report)
    assert alive, f"the worker died: {report}\n{tail}"
    assert len(acked) >= n - 20 and "back" in marks, report  # the producer carried on through the redirect
    assert finished and not any(left.values()), f"{report}\n{tail}"
    if not force or durable:
        assert not twice, report  # no crash: nothing explains a second run
        assert not lost, report
    else:  # a fetch or ack the frozen M had not replicated: only a task M held before it froze can run again
        assert all(int(k.removeprefix("fo")) < failover_at for k in twice), report
