"""Redis out of reach, said once: each part of a worker logs the outage once with its cause, and the worker says in
one line when Redis answers again and how long it was gone (worker/observability/outage.py). Before, a worker
logged about six WARNING lines a second through an outage (61 in 10 s) and never said Redis was back."""

from __future__ import annotations

import logging
import re
import signal
import time
from typing import Any

import redis

from django_redisq.worker.observability.outage import Outage
from tests.conftest import WorkerProcess
from tests.helpers import keys, wait_for

REFUSED = redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_part_says_an_outage_once_and_its_end_is_one_line(caplog: Any):
    clock = Clock()
    outage = Outage("w1", clock=clock)
    with caplog.at_level(logging.DEBUG, logger="django_redisq"):
        outage.answered()  # all is well: nothing to say
        for _ in range(20):
            outage.failed("heartbeat", REFUSED, "heartbeat of worker %s failed (%s)", "w1", REFUSED)
            outage.failed("fetch", REFUSED, "fetch from queue %s failed (%s)", "default", REFUSED)
        clock.now += 12.5
        outage.answered()
        outage.answered()  # said once
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"heartbeat of worker w1 failed ({REFUSED}) (said once until Redis answers again)",
        f"fetch from queue default failed ({REFUSED}) (said once until Redis answers again)",
        "worker w1 reaches Redis again after 12.5 s; failed meanwhile: heartbeat 20x, fetch 20x",
    ]
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) == 38  # the repeats, for whoever wants them


def test_a_second_outage_is_said_again_and_an_answer_that_would_repeat_is_no_outage(caplog: Any):
    outage = Outage("w1", clock=Clock())
    bug = redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
    with caplog.at_level(logging.WARNING, logger="django_redisq"):
        outage.failed("fetch", REFUSED, "fetch failed (%s)", REFUSED)
        outage.answered()
        outage.failed("fetch", REFUSED, "fetch failed (%s)", REFUSED)
        outage.failed("fetch", bug, "fetch failed (%s)", bug)
        outage.failed("fetch", bug, "fetch failed (%s)", bug)
    lines = [r.getMessage() for r in caplog.records]
    assert sum("said once" in line for line in lines) == 2 and sum("reaches Redis again" in line for line in lines) == 1
    assert sum("WRONGTYPE" in line for line in lines) == 2  # not transient: every time, as before
    assert outage.since is not None  # the second outage is still under way


def test_a_worker_through_a_redis_restart_logs_each_part_once_then_one_line(own_server: Any):
    wp = WorkerProcess(own_server.url, "default", "emails", "--concurrency", "2")
    try:
        client = redis.Redis.from_url(own_server.url)
        assert wait_for(lambda: client.zcard(keys("default").workers) > 0, timeout=30), wp.printed()
        client.close()
        before = len(wp.printed())
        own_server.stop()
        time.sleep(3)  # the point: an outage of a few seconds, in which each part retries many times
        own_server.start()
        assert wait_for(lambda: "reaches Redis again" in wp.printed()[before:], timeout=30), wp.printed()[before:]
    finally:
        wp.proc.send_signal(signal.SIGTERM)
        wp.output()
    during = wp.printed()[before:]
    warnings = [line for line in during.splitlines() if " WARNING " in line]
    parts = [re.sub(r"\d+(\.\d+)?", "N", line.split(" WARNING ", 1)[1].split(" (", 1)[0]) for line in warnings
             if "said once" in line]
    assert parts and len(parts) == len(set(parts)), warnings  # each part once
    assert sum("reaches Redis again" in line for line in warnings) == 1, warnings
    back = next(line for line in warnings if "reaches Redis again" in line)
    assert float(re.search(r"after (\d+\.\d) s", back)[1]) >= 3.0 and "heartbeat" in back, back
    repeated = [line for line in warnings if "failed" in line and "said once" not in line and "reaches" not in line]
    assert not repeated, repeated
