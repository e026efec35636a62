"""Celery with its Redis broker, ``task_acks_late=True`` (an ack after the task, as the others), no result backend.

Worker: ``celery -A celery_peer worker -P threads -c N -l INFO``. The thread pool, not the default prefork:
the same shape as the other workers measured here (threads in one process), and Celery's docs give it
for I/O-bound tasks; its prefork pool would fork N children on a 2-core machine. Logging: the worker's own
``-l INFO`` (to stderr: a line per task received and per task succeeded).
"""

from __future__ import annotations

import os
from pathlib import Path

import redis
from celery import Celery
from common import record_start, rpush_one, sleep_one

NAME = "celery"
PACKAGE = "celery"
URL = os.environ["BENCH_REDIS_URL"]
DEFAULT_CONC = 4
WORKER = f"1 process, -P threads -c {DEFAULT_CONC}"

RESULTS_DEFAULT = False
RESULTS = os.environ.get("BENCH_RESULTS", "") == "on"  # the redis-cost section's switch: the Redis result backend
RESULTS_SWITCH = True

app = Celery("celery_peer", broker=URL, backend=URL if RESULTS else None)
app.conf.update(task_acks_late=True, task_ignore_result=not RESULTS, broker_connection_retry_on_startup=True,
                worker_redirect_stdouts=False)


@app.task
def noop(x: int) -> int:
    return x


@app.task
def rpush(x: int) -> int:
    return rpush_one(x)


@app.task
def sleep_io(x: int) -> int:
    return sleep_one(x)


@app.task
def stamp(x: int) -> int:
    return record_start(x)


KINDS = {"noop": noop, "rpush": rpush, "sleep": sleep_io, "stamp": stamp}


def enqueue(kind: str, i: int) -> None:
    KINDS[kind].delay(i)


def fill(kind: str, n: int) -> None:
    task = KINDS[kind]
    for i in range(n):
        task.delay(i)


def done_count(r: redis.Redis, n: int) -> int:
    """Queued in the list ``celery``, delivered and not acked in the hash ``unacked`` (acks_late): the rest is done."""
    return n - int(r.llen("celery")) - int(r.hlen("unacked"))


def worker_desc(conc: int | None) -> str:
    return WORKER if conc is None else f"-P threads -c {conc}"


def worker_argv(bindir: Path, conc: int | None, index: int = 0) -> list[str] | None:
    return [str(bindir / "celery"), "-A", "celery_peer", "worker", "-P", "threads", "-c", str(conc or DEFAULT_CONC),
            "-l", "INFO", "-n", f"bench{index}@%h"]
