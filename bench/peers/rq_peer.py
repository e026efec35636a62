"""RQ with its SimpleWorker (no fork per job); worker: ``rq worker -w rq.worker.SimpleWorker default``."""

from __future__ import annotations

import os
from pathlib import Path

import redis
from common import record_start
from rq import Queue

NAME = "rq"
PACKAGE = "rq"
URL = os.environ["BENCH_REDIS_URL"]
WORKER = "1 process, SimpleWorker"

queue = Queue("default", connection=redis.Redis.from_url(URL))


def noop(x: int) -> int:
    return x


def stamp(x: int) -> int:
    return record_start(x)


def enqueue_noop(i: int) -> None:
    queue.enqueue(noop, i)


def enqueue_stamp(i: int) -> None:
    queue.enqueue(stamp, i)


def fill(n: int) -> None:
    for start in range(0, n, 1000):  # RQ's bulk path: one pipeline per batch
        queue.enqueue_many([Queue.prepare_data(noop, (i,)) for i in range(start, min(n, start + 1000))])


def done_count(r: redis.Redis, n: int) -> int:
    return int(r.zcard("rq:finished:default"))


def worker_argv(bindir: Path) -> list[str]:
    return [str(bindir / "rq"), "worker", "--url", URL, "-w", "rq.worker.SimpleWorker", "default"]
