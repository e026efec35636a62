"""The whole life of a task on a Redis Cluster whose queues live on different masters.

One cluster per session (tests/conftest.py ``redis_cluster``); the queues of
tests/settings.py (default, emails, low) hash to three different masters, which
the first test asserts, so every cross-queue read (stats, the admin's Queues
page, the CLI) must reach three nodes. The scripts' slot proof is in
tests/store/scripts (each script test runs on this cluster too).
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command
from redis.cluster import RedisCluster

from django_redisq import connection
from django_redisq.compat import TaskResultStatus, task_backends
from django_redisq.ops.inspector import Inspector
from django_redisq.settings.read import get_options
from django_redisq.store.keys import QueueKeys
from django_redisq.worker.worker import Worker
from tests.helpers import reaped_by_connection, wait_for
from tests.testapp.topology_tasks import always_fails, fails_once, mark, runs
from tests.topologies.conftest import FAST

pytestmark = pytest.mark.cluster
QUEUES = ("default", "emails", "low")


def test_the_queues_live_on_three_masters(cluster):
    nodes = {q: cluster.get_node_from_key(QueueKeys(q).pending).name for q in QUEUES}
    assert len(set(nodes.values())) == 3, nodes
    assert all(n.server_type == "primary" for n in (cluster.get_node_from_key(QueueKeys(q).pending) for q in QUEUES))


def test_enqueue_run_ack_on_every_queue(cluster):
    results = [mark.using(queue_name=q).enqueue(f"{q}-{i}") for q in QUEUES for i in range(5)]
    assert Worker(list(QUEUES), burst=True, concurrency=2).run() == 15
    for res in results:
        assert task_backends["default"].get_result(res.id).status == TaskResultStatus.SUCCESSFUL
    assert runs() == {f"{q}-{i}": 1 for q in QUEUES for i in range(5)}
    figures = {f.queue: f for f in Inspector(get_options()).figures()}
    assert {q: figures[q].totals["processed"] for q in QUEUES} == dict.fromkeys(QUEUES, 5)


def test_a_retry_and_a_dead_letter(cluster):
    ok = fails_once.using(queue_name="emails").enqueue("once")
    bad = always_fails.using(queue_name="low").enqueue("never")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and task_backends["default"].get_result(ok.id).status != TaskResultStatus.SUCCESSFUL:
        Worker(["emails", "low"], burst=True).run()  # a retry waits out its backoff in scheduled, then is promoted
        time.sleep(0.05)
    backend = task_backends["default"]
    assert backend.get_result(ok.id).status == TaskResultStatus.SUCCESSFUL and runs() == {"once": 1}
    Worker(["low"], burst=True).run()
    assert backend.get_result(bad.id).status == TaskResultStatus.FAILED
    assert Inspector(get_options()).dead_counts() == {"default": 0, "emails": 0, "low": 1}


def _killed_mid_run_then_rescued(victim: Any, queues: list[str], ids: list[str],
                                 held: Callable[[], dict[str, int]]) -> dict[str, int]:
    """SIGKILL ``victim`` once it ran 8 tasks; a worker on ``queues`` then finishes every one of ``ids``. What the victim
    held when it died, per physical queue (``held``): more than nothing, or the test would prove nothing."""
    if not wait_for(lambda: 8 <= sum(runs().values()), 30):
        victim.proc.kill()
        pytest.fail(f"the victim ran nothing: {victim.output()[-2000:]}")
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(10)
    when_killed = held()
    assert sum(when_killed.values()) > 0, "the victim held nothing when it died: the test proves nothing"
    rescuer = Worker(queues, concurrency=4)
    thread = threading.Thread(target=rescuer.run, daemon=True)
    thread.start()
    try:
        backend = task_backends["default"]
        assert wait_for(lambda: all(backend.get_result(i).status == TaskResultStatus.SUCCESSFUL for i in ids), 30)
    finally:
        rescuer.request_stop()
        thread.join(15)
    return when_killed


def test_a_sigkilled_workers_tasks_are_reaped_and_nothing_is_lost(cluster, redis_cluster, redis_url, run_worker_process):
    n = 60
    ids = [mark.using(queue_name=QUEUES[i % 3]).enqueue(f"k{i}", 0.05).id for i in range(n)]
    env = {"REDISQ_TEST_CLUSTER": "1", "REDISQ_TEST_EFFECTS_URL": redis_url, **{f"REDISQ_OPT_{k}": str(v) for k, v in FAST.items()}}
    victim = run_worker_process(*QUEUES, "--concurrency", "4", "--name", "victim", env={**env, "REDISQ_TEST_REDIS_URL": redis_cluster.url})
    held = _killed_mid_run_then_rescued(victim, list(QUEUES), ids, lambda: {
        q: sum(cluster.llen(key) for key in cluster.scan_iter(match=QueueKeys(q).processing("*"))) for q in QUEUES})
    done = runs()
    assert set(done) == {f"k{i}" for i in range(n)}  # nothing lost; at least once (a task the victim was running may run twice)
    print(f"\ncluster SIGKILL: the victim held {held}; {sum(v > 1 for v in done.values())} ran twice")


def test_stats_cli_and_admin_queues_page_read_every_node(cluster, admin_client):
    from django.urls import reverse

    for i, q in enumerate(QUEUES):
        for j in range(i + 1):
            mark.using(queue_name=q).enqueue(f"{q}{j}")
    out = io.StringIO()
    call_command("redisq", "stats", "--json", stdout=out)
    assert {row["queue"]: row["pending"] for row in json.loads(out.getvalue())} == {"default": 1, "emails": 2, "low": 3}
    out = io.StringIO()
    call_command("redisq", "queue", "list", stdout=out)
    assert all(q in out.getvalue() for q in QUEUES)
    page = admin_client.get(reverse("admin:django_redisq_deadletter_queues"))  # Inspector.stats() of every queue
    assert page.status_code == 200
    ((_, rows, *_),) = page.context["backends"]
    assert {s.queue: s.pending for s, *_ in rows} == {"default": 1, "emails": 2, "low": 3}


def test_aenqueue_and_aget_result(cluster):
    async def go() -> list[Any]:
        results = [await mark.using(queue_name=q).aenqueue(f"a-{q}") for q in QUEUES]
        return [await task_backends["default"].aget_result(res.id) for res in results]

    before = asyncio.run(go())
    assert [r.status for r in before] == [TaskResultStatus.READY] * 3
    Worker(list(QUEUES), burst=True).run()

    async def read() -> list[Any]:
        return list(await asyncio.gather(*(task_backends["default"].aget_result(r.id) for r in before)))

    after = asyncio.run(read())
    assert [r.status for r in after] == [TaskResultStatus.SUCCESSFUL] * 3 and runs() == {f"a-{q}": 1 for q in QUEUES}


# -- partitioned queues (core/partitions.py): one logical queue over the masters --

PARTS = 8
LOW = ["low", *(f"low~{i}" for i in range(1, PARTS))]


@pytest.fixture
def partitioned(cluster: RedisCluster) -> Iterator[RedisCluster]:
    """The cluster, with queue ``low`` in 8 partitions."""
    from django.conf import settings
    from django.test import override_settings

    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["OPTIONS"]["QUEUE_OPTIONS"] = {"low": {"PARTITIONS": PARTS}}
    with override_settings(TASKS=tasks):
        connection.reset()
        yield cluster
    connection.reset()


def test_partitions_spread_over_the_masters_and_drain_once(partitioned):
    nodes = {q: partitioned.get_node_from_key(QueueKeys(q).pending).name for q in LOW}
    assert len(set(nodes.values())) > 1, nodes  # the point: one logical queue on several masters
    ids = [mark.using(queue_name="low").enqueue(f"p{i}").id for i in range(80)]
    held = {q: partitioned.llen(QueueKeys(q).pending) for q in LOW}
    assert all(n == 10 for n in held.values()), held
    figures = {f.queue: f for f in Inspector(get_options()).figures()}
    assert set(figures) == set(QUEUES) and figures["low"].pending == 80
    assert Worker(["low"], burst=True, concurrency=4).run() == 80
    assert runs() == {f"p{i}": 1 for i in range(80)}
    backend = task_backends["default"]
    assert all(backend.get_result(i).status == TaskResultStatus.SUCCESSFUL for i in ids)
    assert {f.queue: f for f in Inspector(get_options()).figures()}["low"].totals["processed"] == 80


def test_a_sigkilled_worker_on_a_partitioned_queue_loses_nothing(partitioned, redis_cluster, redis_url, run_worker_process):
    n = 64
    ids = [mark.using(queue_name="low").enqueue(f"q{i}", 0.05).id for i in range(n)]
    env = {"REDISQ_TEST_CLUSTER": "1", "REDISQ_TEST_EFFECTS_URL": redis_url, "REDISQ_TEST_REDIS_URL": redis_cluster.url,
           "REDISQ_QUEUE_OPTIONS": json.dumps({"low": {"PARTITIONS": PARTS}}), **{f"REDISQ_OPT_{k}": str(v) for k, v in FAST.items()}}
    victim = run_worker_process("low", "--concurrency", "4", "--name", "victim", env=env)
    held = _killed_mid_run_then_rescued(victim, ["low"], ids, lambda: {
        q: sum(partitioned.llen(key) for key in partitioned.scan_iter(match=QueueKeys(q).processing("*"))) for q in LOW})
    assert set(runs()) == {f"q{i}" for i in range(n)}  # nothing lost, in any partition
    assert Inspector(get_options()).figures()[QUEUES.index("low")].totals["recovered"] > 0
    print(f"\npartitioned SIGKILL: the victim held {held}")


def test_a_sigkilled_worker_is_reaped_by_its_connection_on_every_master(cluster, redis_cluster, redis_url, run_worker_process):
    """With the default timings (WORKER_TIMEOUT 10 s), each queue's poller asks the master that holds the queue which
    connections it still has: the dead worker is reaped on all three masters in a few seconds."""
    env = {"REDISQ_TEST_CLUSTER": "1", "REDISQ_TEST_EFFECTS_URL": redis_url, "REDISQ_TEST_REDIS_URL": redis_cluster.url}
    victim = run_worker_process(*QUEUES, "-c", "3", "--name", "victim", env=env)
    for q in QUEUES:
        mark.using(queue_name=q).enqueue(f"long-{q}", 20)

    def held(q: str) -> int:
        return sum(cluster.llen(key) for key in cluster.scan_iter(match=QueueKeys(q).processing("*")))

    assert wait_for(lambda: all(held(q) == 1 for q in QUEUES), 30), victim.output()[-2000:]
    rescuer = run_worker_process(*QUEUES, "-c", "3", "--name", "rescuer", env=env)
    assert wait_for(lambda: all(cluster.hlen(QueueKeys(q).presence) == 2 for q in QUEUES), 30)
    time.sleep(0.5)
    victim.proc.send_signal(signal.SIGKILL)
    assert wait_for(lambda: all(cluster.zcard(QueueKeys(q).workers) == 1 for q in QUEUES), 15)
    # by the connection, not by the timeout (about 1 s after the kill, the timeout's 10 s; the log says which, however
    # busy the machine)
    assert wait_for(lambda: all(reaped_by_connection(rescuer.printed(), q) for q in QUEUES), 10), rescuer.printed()[-3000:]
    assert wait_for(lambda: all(held(q) == 1 for q in QUEUES), 10)  # each long task now in the rescuer's hands
