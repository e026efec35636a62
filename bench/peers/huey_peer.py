"""Huey's RedisHuey (results kept, blocking dequeue); worker: ``huey_consumer huey_peer.huey -w 1 -k thread``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import redis
from huey import RedisHuey

NAME = "huey"
PACKAGE = "huey"
URL = os.environ["BENCH_REDIS_URL"]
WORKER = "1 process x 1 thread (its default)"

huey = RedisHuey("bench", url=URL)
_stamp_client: redis.Redis | None = None


@huey.task()
def noop(x: int) -> int:
    return x


@huey.task()
def stamp(x: int) -> int:
    started = time.time()
    global _stamp_client
    if _stamp_client is None:
        _stamp_client = redis.Redis.from_url(URL)
    _stamp_client.rpush("bench:start", f"{x} {started!r}")
    return x


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
