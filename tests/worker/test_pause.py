"""Pausing a queue: real runworker processes stop starting its tasks within a second and resume within a second;
nothing is lost, even when a worker is SIGKILLed while paused; the command line, health and metrics show it."""

from __future__ import annotations

import io
import json
import signal
import time

import pytest
from django.core.management import CommandError, call_command

from django_redisq.compat import TaskResultStatus
from django_redisq.ops.inspector import Inspector
from django_redisq.ops.operations import QueueOperations
from tests.helpers import heartbeats, keys, wait_for
from tests.testapp import tasks
from tests.testapp.tasks import SPANS

FAST = {"REDISQ_OPT_HEARTBEAT_INTERVAL": "0.2", "REDISQ_OPT_WORKER_TIMEOUT": "1.5"}


def starts(r) -> list[float]:
    return [float(e.split("|")[1]) for e in r.lrange(SPANS, 0, -1)]


def worker_of(r) -> str:
    """The id of the one worker registered on the default queue."""
    [worker] = r.zrange(keys().workers, 0, -1)
    return worker


def redisq(*args: str) -> str:
    out = io.StringIO()
    call_command("redisq", *args, stdout=out)
    return out.getvalue()


def ops() -> QueueOperations:
    return QueueOperations(Inspector.for_alias("default"))


def test_workers_stop_starting_within_a_second_and_resume_within_a_second(r, run_worker_process):
    # a backlog the worker cannot finish before the pause (10 started, 20 prefetched of 100), and whose drain after
    # the resume stays short (100 x 0.05 s over 2 threads: 2.5 s)
    results = tasks.span.enqueue_many([(["default", 0.05], {}) for _ in range(100)])
    wp = run_worker_process("default", "--concurrency", "2", "--prefetch", "20", env=FAST)
    assert wait_for(lambda: len(starts(r)) >= 10, timeout=30)

    paused_at = time.time()
    ops().act("pause", "default", "test")
    # the worker saw the pause: it handed back what it had not started, and what ran ended (a worker that missed it
    # would go on taking tasks of 0.05 s, and its processing list would never be empty)
    assert wait_for(lambda: all(r.llen(k) == 0 for k in r.scan_iter(keys().processing("*"))), timeout=10)
    ran = starts(r)
    # the point: a window in which nothing may start (an absence has no event), in the worker's own rounds: three
    # heartbeats (0.2 s each), more than two looks of its pause watch (every 0.25 s)
    assert heartbeats(r, worker_of(r), 3)
    assert starts(r) == ran
    # the contract is a second (the watch's 0.25 s plus a round trip, ~0.3 s measured); 2 s leaves a loaded machine
    # room, while the wait above already failed a worker that ignored the pause
    assert ran and max(ran) < paused_at + 2.0, max(ran) - paused_at
    assert r.llen(keys().pending) == 100 - len(ran)  # every unstarted task waits in pending, none lost
    tasks.span.enqueue("default", 0)  # enqueues still succeed
    assert heartbeats(r, worker_of(r), 2)  # and the new task does not start: two more rounds
    assert len(starts(r)) == len(ran)

    resumed_at = time.time()
    ops().act("resume", "default", "test")
    assert wait_for(lambda: len(starts(r)) > len(ran), timeout=5)
    assert min(s for s in starts(r) if s > resumed_at) < resumed_at + 2.0  # a second promised: room as above
    assert wait_for(lambda: all(tasks.span.get_result(x.id).status == TaskResultStatus.SUCCESSFUL for x in results), timeout=60)
    wp.proc.send_signal(signal.SIGTERM)
    out = wp.output()
    assert out.count("queue default is paused") == 1 and out.count("queue default resumed") == 1, out[-2000:]
    assert "fetch from queue default failed" not in out  # no error path, no log line per check


def test_nothing_is_lost_when_a_worker_is_killed_while_paused(r, run_worker_process):
    results = tasks.span.enqueue_many([(["default", 0.3], {}) for _ in range(30)])
    wp = run_worker_process("default", "--concurrency", "2", "--prefetch", "10", env=FAST)
    assert wait_for(lambda: len(starts(r)) >= 2, timeout=30)
    ops().act("pause", "default", "test")
    time.sleep(0.1)
    wp.proc.kill()  # SIGKILL while paused: running tasks in its processing list, the rest handed back or held
    wp.proc.wait(10)
    before = len(starts(r))
    wp2 = run_worker_process("default", "--concurrency", "2", env=FAST)
    # the new worker reaps the dead one: its running tasks go back to pending; it starts none of them while paused
    assert wait_for(lambda: r.zcard(keys().workers) == 1 and not any(r.llen(k) for k in r.scan_iter(keys().processing("*"))),
                    timeout=15)
    assert r.llen(keys().pending) == 30 - sum(tasks.span.get_result(x.id).status == TaskResultStatus.SUCCESSFUL for x in results)
    assert heartbeats(r, worker_of(r), 3)  # a window in which nothing may start: three rounds of the new worker
    assert len(starts(r)) == before  # nothing started since the kill (a count: when the kill landed is the machine's)
    ops().act("resume", "default", "test")
    assert wait_for(lambda: all(tasks.span.get_result(x.id).status == TaskResultStatus.SUCCESSFUL for x in results), timeout=60)
    wp2.proc.send_signal(signal.SIGTERM)
    wp2.output()
    assert r.llen(keys().pending) == 0 and r.zcard(keys().dead) == 0


def test_the_command_line_pauses_resumes_and_lists(r):
    assert "paused queue emails" in redisq("queue", "pause", "emails")
    assert "was paused already" in redisq("queue", "pause", "emails")
    listing = redisq("queue")
    assert "emails" in listing and "paused since" in listing and "by manage.py redisq" in listing
    assert [row["queue"] for row in json.loads(redisq("queue", "list", "--json")) if row["paused"]] == ["emails"]
    assert "queue emails is PAUSED since" in redisq("stats")
    assert "resumed queue emails" in redisq("queue", "resume", "emails")
    assert "was not paused" in redisq("queue", "resume", "emails")
    assert "PAUSED" not in redisq("stats")
    with pytest.raises(CommandError, match="not in TASKS"):
        redisq("queue", "pause", "nope")


def test_health_mentions_a_paused_queue_without_failing(r):
    ops().act("pause", "low", "ops")
    out = redisq("health")  # no SystemExit: exit code 0
    assert out.startswith("ok:") and "note: queue low (default) is paused since" in out and "by ops" in out
    data = json.loads(redisq("health", "--json"))
    assert data["status"] == "ok" and data["queues"]["low"]["paused"] is True and len(data["notes"]) == 1


def test_the_metrics_have_a_paused_gauge_per_queue(r):
    from django_redisq.ops.metrics import exposition

    ops().act("pause", "emails", "ops")
    text = exposition()[0].decode()
    assert 'redisq_queue_paused{backend="default",queue="emails"} 1.0' in text
    assert 'redisq_queue_paused{backend="default",queue="default"} 0.0' in text


def test_a_burst_worker_ends_without_waiting_for_a_paused_queue(r, make_worker):
    from tests.helpers import run_in_thread

    ops().act("pause", "emails", "ops")
    waiting = tasks.span.using(queue_name="emails").enqueue("emails", 0)
    done = tasks.span.enqueue("default", 0)
    run_in_thread(make_worker("default", "emails"), timeout=20)
    assert tasks.span.get_result(done.id).status == TaskResultStatus.SUCCESSFUL
    assert tasks.span.get_result(waiting.id).status == TaskResultStatus.READY and r.llen(keys("emails").pending) == 1
