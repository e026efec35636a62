"""The scaling signal: per queue, the tasks a worker could start now (``redisq_queue_tasks{state="ready"}``, ``ready`` in
``redisq stats --json``), held against a known backlog of delayed, limited, paused and ready tasks.

The backlog, built through the real paths (enqueue, a worker's fetch, ``redisq queue pause``):

- ``default``: 4 plain and 2 prioritized tasks (ready); 3 delayed an hour (scheduled); 5 of a task with
  ``max_running=3`` fetched by a worker: 3 hold its slots (held), 2 wait for one (blocked: pending, not ready).
- ``emails``: 3 tasks, the queue paused (pending, none ready).
- ``low``: ``MAX_RUNNING=2`` and 5 tasks, one of them fetched (holding a queue slot): 1 more may start.
"""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from django_redisq.ops.inspector import Inspector
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import QueueKeys
from django_redisq.store.reads.queues import ready_now
from tests.conftest import topology_settings
from tests.ops.test_metrics import sample, scrape
from tests.testapp import tasks

EXPECTED = {  # queue -> (pending, scheduled, held, ready)
    "default": (8, 3, 3, 6),
    "emails": (3, 0, 0, 0),
    "low": (4, 0, 1, 1),
}


@pytest.fixture
def backlog(r: Any) -> Any:
    with topology_settings(QUEUE_OPTIONS={"low": {"MAX_RUNNING": 2}}):
        broker = Broker(get_options("default"))  # with the queue's limit, as a worker's
        broker.heartbeat(["default", "emails", "low"], "w1", {})
        tasks.limited.enqueue_many([([f"k{i}"], {"seconds": 0.0}) for i in range(5)])
        limited = broker.fetch("default", "w1", 5)
        assert sorted(d.code for d in limited) == [1, 1, 1, 6, 6]  # 3 RUN (slots taken), 2 LIMITED (blocked)
        for i in range(4):
            tasks.noop.enqueue(i)
        for i in range(2):
            tasks.noop.using(priority=5).enqueue(i)
        for i in range(3):
            tasks.noop.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(i)
        for i in range(3):
            tasks.noop.using(queue_name="emails").enqueue(i)
        call_command("redisq", "queue", "pause", "emails", stdout=io.StringIO())
        for i in range(5):
            tasks.noop.using(queue_name="low").enqueue(i)
        (low,) = broker.fetch("low", "w1", 1)
        assert low.code == 1
        yield


def test_the_figures_hold_ready_apart_from_delayed_limited_and_paused(backlog):
    got = {f.queue: (f.pending, f.scheduled, f.held, f.ready) for f in Inspector.for_alias("default").figures()}
    assert got == EXPECTED


def test_the_pending_list_the_redis_list_scaler_reads_is_exact_only_without_priorities_limits_or_a_pause(backlog, r):
    """The figures docs/howto/autoscaling.md quotes: LLEN of ``redisq:{<queue>}:pending`` beside ``ready``."""
    llen = {q: r.llen(QueueKeys(q).pending) for q in EXPECTED}
    assert llen == {"default": 4, "emails": 3, "low": 4}  # ready: 6 (2 prioritized), 0 (paused), 1 (MAX_RUNNING 2)


def test_stats_json_says_ready(backlog):
    out = io.StringIO()
    call_command("redisq", "stats", "--json", stdout=out)
    rows = {row["queue"]: row for row in json.loads(out.getvalue())}
    assert {q: (row["pending"], row["scheduled"], row["held"], row["ready"]) for q, row in rows.items()} == EXPECTED


def test_the_gauge_has_a_ready_state(backlog):
    s = scrape()
    for queue, (pending, _, _, ready) in EXPECTED.items():
        assert sample(s, "redisq_queue_tasks", queue=queue, state="ready") == ready
        assert sample(s, "redisq_queue_tasks", queue=queue, state="pending") == pending


@pytest.mark.parametrize(("args", "ready"), [
    ((10, False, 0, 0, ""), 10),
    ((10, True, 0, 0, ""), 0),  # paused
    ((10, False, 3, 5, ""), 2),  # MAX_RUNNING 5, 3 slots taken
    ((10, False, 7, 5, ""), 0),  # more slots taken than the limit (it was lowered)
    ((10, False, 0, 0, "3/m"), 3),  # a rate limit: at most its starts in one period
    ((2, False, 0, 0, "3/m"), 2),
    ((10, False, 1, 2, "3/m"), 1),
])
def test_ready_is_capped_by_each_limit(args, ready):
    assert ready_now(*args) == ready
