"""Huey's RedisHuey (results kept, blocking dequeue); worker: ``huey_consumer huey_peer.huey -w N -k thread``.

Logging: the consumer's own (INFO to stderr, its default: a line per task).
"""

from __future__ import annotations

import os
from pathlib import Path

import redis
from common import record_start, rpush_one, sleep_one
from huey import RedisHuey

NAME = "huey"
PACKAGE = "huey"
URL = os.environ["BENCH_REDIS_URL"]
WORKER = "1 process x 1 thread (its default)"

RESULTS_DEFAULT = True
RESULTS = os.environ.get("BENCH_RESULTS", "") != "off"  # the redis-cost section's switch: RedisHuey(results=False)
RESULTS_SWITCH = True

huey = RedisHuey("bench", url=URL, results=RESULTS)


@huey.task()
def noop(x: int) -> int:
    return x


@huey.task()
def rpush(x: int) -> int:
    return rpush_one(x)


@huey.task()
def sleep_io(x: int) -> int:
    return sleep_one(x)


@huey.task()
def stamp(x: int) -> int:
    return record_start(x)


KINDS = {"noop": noop, "rpush": rpush, "sleep": sleep_io, "stamp": stamp}


def enqueue(kind: str, i: int) -> None:
    KINDS[kind](i)


def fill(kind: str, n: int) -> None:
    task = KINDS[kind]
    for i in range(n):
        task(i)


def done_count(r: redis.Redis, n: int) -> int:
    """Huey has no ack: a task is done when its return value is in the result hash (without results: when its
    queue is empty, at most one task early)."""
    if not RESULTS:
        return n - int(r.llen("huey.redis.bench"))
    return int(r.hlen("huey.results.bench"))


def worker_desc(conc: int | None) -> str:
    return WORKER if conc is None else f"-k thread -w {conc}"


def worker_argv(bindir: Path, conc: int | None, index: int = 0) -> list[str] | None:
    return [str(bindir / "huey_consumer"), "huey_peer.huey", "-w", str(conc or 1), "-k", "thread"]
