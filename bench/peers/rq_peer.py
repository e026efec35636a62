"""RQ with its SimpleWorker (no fork per job); worker: ``rq worker -w rq.worker.SimpleWorker default``.

One job at a time per worker process (``--concurrency`` above 1 is not measured). Logging: the
``rq worker`` command's own (INFO to stderr, its default: lines per job).
"""

from __future__ import annotations

import os
from pathlib import Path

import redis
from common import record_start, rpush_one, sleep_one
from rq import Queue

NAME = "rq"
PACKAGE = "rq"
URL = os.environ["BENCH_REDIS_URL"]
WORKER = "1 process, SimpleWorker"

RESULTS_DEFAULT = True
RESULTS = os.environ.get("BENCH_RESULTS", "") != "off"  # the redis-cost section's switch: result_ttl=0 (job deleted when done)
RESULTS_SWITCH = True
_OPTS = {} if RESULTS else {"result_ttl": 0}

queue = Queue("default", connection=redis.Redis.from_url(URL))


def noop(x: int) -> int:
    return x


def rpush(x: int) -> int:
    return rpush_one(x)


def sleep_io(x: int) -> int:
    return sleep_one(x)


def stamp(x: int) -> int:
    return record_start(x)


KINDS = {"noop": noop, "rpush": rpush, "sleep": sleep_io, "stamp": stamp}


def enqueue(kind: str, i: int) -> None:
    queue.enqueue(KINDS[kind], i, **_OPTS)


def fill(kind: str, n: int) -> None:
    fn = KINDS[kind]
    for start in range(0, n, 1000):  # RQ's bulk path: one pipeline per batch
        queue.enqueue_many([Queue.prepare_data(fn, (i,), **_OPTS) for i in range(start, min(n, start + 1000))])


def done_count(r: redis.Redis, n: int) -> int:
    if not RESULTS:  # result_ttl=0: no finished registry; done when its queue is empty, at most one job early
        return n - int(r.llen("rq:queue:default"))
    return int(r.zcard("rq:finished:default"))


def worker_desc(conc: int | None) -> str:
    return WORKER if conc is None else "SimpleWorker"


def worker_argv(bindir: Path, conc: int | None, index: int = 0) -> list[str] | None:
    if conc not in (None, 1):
        return None
    return [str(bindir / "rq"), "worker", "--url", URL, "-w", "rq.worker.SimpleWorker", "default"]
