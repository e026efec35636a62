"""Redis Sentinel: tasks go through the master the sentinels name, and survive its death by SIGKILL.

One master, one replica and three sentinels per session (tests/conftest.py
``redis_sentinel``, down after 1 s). After the failover test the setup is
restored (the old master started again and failed back to), so the tests
that share the session's sentinels do not depend on running before it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_redisq import connection
from django_redisq.compat import TaskResultStatus, task_backends
from django_redisq.settings.read import get_options
from django_redisq.store.keys import QueueKeys
from django_redisq.store.steps.presence import CONFIRM, POLL_EVERY
from django_redisq.worker.worker import Worker
from tests.conftest import topology_settings
from tests.helpers import command_calls, failover_run, reaped_by_connection, wait_for
from tests.testapp import topology_tasks
from tests.testapp.topology_tasks import mark, runs

pytestmark = pytest.mark.sentinel
FAST = {"HEARTBEAT_INTERVAL": 0.5, "WORKER_TIMEOUT": 3.0}


def _master(setup: Any) -> redis.Redis:
    port = setup.master_port()
    assert port, "no sentinel names a master"
    return redis.Redis(port=port, decode_responses=True)


@pytest.fixture
def sentinel(redis_sentinel: Any, r: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """TASKS pointing at the sentinels (the master by name, no address), emptied first; effects go to the single Redis."""
    monkeypatch.setattr(topology_tasks, "EFFECTS_URL", redis_url)
    _master(redis_sentinel).flushall()
    with topology_settings(REDIS_URL=f"redis://{redis_sentinel.master_name}/0", SENTINELS=redis_sentinel.sentinels,
                           SENTINEL_MASTER=redis_sentinel.master_name, **FAST):
        connection.reset()
        yield redis_sentinel
    connection.reset()
    if redis_sentinel.master_port() != redis_sentinel.master.port:  # this file's failover test
        redis_sentinel.restore(fail_back=False)


def test_enqueue_run_ack_through_the_master_the_sentinels_name(sentinel):
    client = connection.get_client(get_options())
    assert client.connection_pool.get_master_address() == ("127.0.0.1", sentinel.master.port)  # type: ignore[attr-defined]
    results = [mark.enqueue(f"s{i}") for i in range(10)]
    assert Worker(["default"], burst=True, concurrency=2).run() == 10
    assert all(task_backends["default"].get_result(res.id).status == TaskResultStatus.SUCCESSFUL for res in results)
    assert runs() == {f"s{i}": 1 for i in range(10)}
    assert _master(sentinel).exists(QueueKeys("default").task(results[0].id))  # stored on the master ...
    replica = redis.Redis(port=sentinel.replica.port, decode_responses=True)
    assert wait_for(lambda: replica.exists(QueueKeys("default").task(results[0].id)), 5)  # ... and replicated


def test_sigkilled_master_fails_over_and_producers_and_workers_carry_on(sentinel):
    """Asynchronous replication may lose what the master acknowledged last: measured and reported, not asserted."""
    with failover_run(lambda: sentinel.master.stop(signal.SIGKILL), lambda key: mark.enqueue(key, 0.002),
                      n=300, kill_at=100, gap=0.005) as run:
        assert sentinel.master_port() == sentinel.replica.port, "the sentinels did not promote the replica"
        new_master = redis.Redis(port=sentinel.replica.port, decode_responses=True)
        present = [(i, k, at) for i, k, at in run.acked if new_master.exists(QueueKeys("default").task(i))]
        lost = [k for i, k, _ in run.acked if not new_master.exists(QueueKeys("default").task(i))]
        backend = task_backends["default"]
        finished = wait_for(lambda: all(backend.get_result(i).status == TaskResultStatus.SUCCESSFUL for i, _, _ in present), 60)
    done = runs()
    report = (f"{run.report('failover (no durable mode: asynchronous replication may lose the last writes)', lost)}; "
              f"{sum(done.get(k, 0) > 1 for _, k, _ in present)} ran twice")
    print("\n" + report)
    assert finished, f"not every task on the new master finished; {report}"
    assert all(done.get(k, 0) >= 1 for _, k, _ in present), f"a present task never ran; {report}"
    assert run.back_at is not None and run.back_at - run.killed_at < 15, report
    after = [k for _, k, at in present if at > run.back_at]
    assert after and all(done[k] == 1 for k in after), f"a task enqueued after the recovery did not run exactly once; {report}"


def test_a_sigkilled_worker_is_reaped_by_its_connection_through_the_sentinels(sentinel, redis_url, run_worker_process):
    """The presence links go to the master the sentinels name; with the default WORKER_TIMEOUT (10 s) the
    dead worker is reaped in a few seconds."""
    import json

    env = {"REDISQ_TEST_REDIS_URL": f"redis://{sentinel.master_name}/0", "REDISQ_TEST_SENTINELS": json.dumps(sentinel.sentinels),
           "REDISQ_TEST_SENTINEL_MASTER": sentinel.master_name, "REDISQ_TEST_EFFECTS_URL": redis_url}
    master = _master(sentinel)
    k = QueueKeys("default")
    victim = run_worker_process("default", "-c", "1", "--name", "victim", env=env)
    mark.enqueue("long", 20)
    assert wait_for(lambda: sum(master.llen(key) for key in master.scan_iter(match=k.processing("*"))) == 1, 30)
    rescuer = run_worker_process("default", "-c", "1", "--name", "rescuer", env=env)
    assert wait_for(lambda: master.hlen(k.presence) == 2, 30)
    time.sleep(0.5)
    victim.proc.send_signal(signal.SIGKILL)
    assert wait_for(lambda: master.zcard(k.workers) == 1, 15)
    # by the connection, not by the timeout (about 1 s after the kill, the timeout's 10 s; the log says which, however
    # busy the machine)
    assert wait_for(lambda: reaped_by_connection(rescuer.printed(), "default"), 10), rescuer.printed()[-3000:]
    rescuer.proc.send_signal(signal.SIGKILL)


def test_a_failover_reaps_no_worker_and_the_presence_links_follow_the_new_master(sentinel, redis_url, run_worker_process):
    """The master dies and the sentinels promote the replica: every client id changes with the server's run, so the
    entries of the old run are never judged; both workers register links to the new master, nobody is reaped, and a
    worker killed after that is reaped by its connection on the new master."""
    import json

    env = {"REDISQ_TEST_REDIS_URL": f"redis://{sentinel.master_name}/0", "REDISQ_TEST_SENTINELS": json.dumps(sentinel.sentinels),
           "REDISQ_TEST_SENTINEL_MASTER": sentinel.master_name, "REDISQ_TEST_EFFECTS_URL": redis_url}
    k = QueueKeys("default")
    a = run_worker_process("default", "-c", "1", "--name", "a", env=env)
    b = run_worker_process("default", "-c", "1", "--name", "b", env=env)
    assert wait_for(lambda: _master(sentinel).hlen(k.presence) == 2, 30)
    sentinel.master.stop(signal.SIGKILL)
    assert wait_for(lambda: sentinel.master_port() == sentinel.replica.port, 60), "the sentinels did not promote the replica"
    new = redis.Redis(port=sentinel.replica.port, decode_responses=True)
    run_id = new.info("server")["run_id"]

    def on_new_master() -> bool:
        try:
            entries = new.hvals(k.presence)
        except redis.RedisError:
            return False
        return len(entries) == 2 and all(e.startswith(run_id + ":") for e in entries)

    assert wait_for(on_new_master, 30), new.hgetall(k.presence)
    # a window in which nobody may be reaped: more presence polls (CLIENT LIST, every POLL_EVERY) of the new master
    # than CONFIRM spans, counted on the new master itself
    polls = command_calls(new, "client|list")
    assert wait_for(lambda: command_calls(new, "client|list") >= polls + round(CONFIRM / POLL_EVERY) + 4, timeout=15)
    assert new.zcard(k.workers) == 2
    a.proc.send_signal(signal.SIGKILL)
    assert wait_for(lambda: new.zcard(k.workers) == 1, 15)
    b.proc.send_signal(signal.SIGTERM)
    out = b.output()
    assert "reaped worker(s) a." in out and reaped_by_connection(out, "default"), out[-3000:]  # not by the timeout
    assert "reaped worker(s) b." not in a.output()
