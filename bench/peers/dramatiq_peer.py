"""Dramatiq with its Redis broker, default middleware; worker: ``dramatiq dramatiq_peer --processes 1``."""

from __future__ import annotations

import os
from pathlib import Path

import dramatiq
import redis
from common import record_start
from dramatiq.brokers.redis import RedisBroker

NAME = "dramatiq"
PACKAGE = "dramatiq"
URL = os.environ["BENCH_REDIS_URL"]
THREADS = int(os.environ.get("BENCH_PEER_THREADS", "8"))  # Dramatiq's default
WORKER = f"1 process x {THREADS} threads (its default threads)"

broker = RedisBroker(url=URL)
dramatiq.set_broker(broker)


@dramatiq.actor
def noop(x: int) -> int:
    return x


@dramatiq.actor
def stamp(x: int) -> int:
    return record_start(x)


def enqueue_noop(i: int) -> None:
    noop.send(i)


def enqueue_stamp(i: int) -> None:
    stamp.send(i)


def fill(n: int) -> None:
    for i in range(n):
        noop.send(i)


def done_count(r: redis.Redis, n: int) -> int:
    """A message leaves ``<ns>:default.msgs`` when it is acked."""
    return n - int(r.hlen("dramatiq:default.msgs"))


def worker_argv(bindir: Path) -> list[str]:
    return [str(bindir / "dramatiq"), "dramatiq_peer", "--processes", "1", "--threads", str(THREADS)]
