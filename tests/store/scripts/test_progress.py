"""progress.lua: a report is stored in the task hash, with the Redis time, only by the worker holding the task."""

from __future__ import annotations

import json

from django_redisq.progress import encode
from tests.helpers import keys, seed_pending


def test_the_holder_stores_its_report_with_the_time_and_replaces_the_last(r, broker):
    broker.heartbeat(["default"], "w1", {})
    seed_pending(r, "t0")
    broker.fetch("default", "w1", 1)
    sec, usec = r.time()
    assert broker.progress.save("default", "t0", "w1", encode(1, 4, "one", 1)) is True
    assert broker.progress.save("default", "t0", "w1", encode(2, 4, "two", 1)) is True
    data = r.hgetall(keys().task("t0"))
    assert json.loads(data["progress"]) == {"done": 2, "total": 4, "message": "two", "attempt": 1}
    assert int(data["progress_at"]) >= int(sec) * 1000 + int(usec) // 1000 - 1
    assert data["state"] == "running"  # nothing else of the task changed


def test_another_worker_or_a_task_that_is_gone_gets_nothing(r, broker):
    broker.heartbeat(["default"], "w1", {})
    seed_pending(r, "t0")
    broker.fetch("default", "w1", 1)
    assert broker.progress.save("default", "t0", "w2", encode(1, 4, "", 1)) is False  # reaped: another holds it now
    assert "progress" not in r.hgetall(keys().task("t0"))
    assert broker.progress.save("default", "gone", "w1", encode(1, 4, "", 1)) is False
    assert not r.exists(keys().task("gone"))  # no lone field without the task's TTL
    seed_pending(r, "t1")  # pending, not held by anyone
    assert broker.progress.save("default", "t1", "w1", encode(1, 4, "", 1)) is False
