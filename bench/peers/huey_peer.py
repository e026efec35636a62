"""Huey's RedisHuey (results kept, blocking dequeue); worker: ``huey_consumer huey_peer.huey -w 1 -k thread``."""

from __future__ import annotations

import os
from pathlib import Path

import redis
from common import record_start
from huey import RedisHuey

NAME = "huey"
PACKAGE = "huey"
URL = os.environ["BENCH_REDIS_URL"]
WORKER = "1 process x 1 thread (its default)"

huey = RedisHuey("bench", url=URL)


@huey.task()
def noop(x: int) -> int:
    return x


@huey.task()
def stamp(x: int) -> int:
    return record_start(x)


def enqueue_noop(i: int) -> None:
    noop(i)


def enqueue_stamp(i: int) -> None:
    stamp(i)


def fill(n: int) -> None:
    for i in range(n):
        noop(i)


def done_count(r: redis.Redis, n: int) -> int:
    """Huey has no ack: a task is done when its return value is in the result hash."""
    return int(r.hlen("huey.results.bench"))


def worker_argv(bindir: Path) -> list[str]:
    return [str(bindir / "huey_consumer"), "huey_peer.huey", "-w", "1", "-k", "thread"]
