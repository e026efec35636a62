"""Dramatiq with its Redis broker, default middleware; worker: ``dramatiq dramatiq_peer --processes 1 --threads N``.

Logging: the ``dramatiq`` command's own (INFO to stderr, its default; it has no quieter level).
"""

from __future__ import annotations

import os
from pathlib import Path

import dramatiq
import redis
from common import record_start, rpush_one, sleep_one
from dramatiq.brokers.redis import RedisBroker

NAME = "dramatiq"
PACKAGE = "dramatiq"
URL = os.environ["BENCH_REDIS_URL"]
THREADS = 8  # Dramatiq's default
WORKER = f"1 process x {THREADS} threads (its default threads)"

RESULTS_DEFAULT = False
RESULTS = os.environ.get("BENCH_RESULTS", "") == "on"  # the redis-cost section's switch: its Results middleware
RESULTS_SWITCH = True

broker = RedisBroker(url=URL)
if RESULTS:
    from dramatiq.results import Results
    from dramatiq.results.backends import RedisBackend

    broker.add_middleware(Results(backend=RedisBackend(url=URL)))
dramatiq.set_broker(broker)
_OPTS = {"store_results": True} if RESULTS else {}


@dramatiq.actor(**_OPTS)
def noop(x: int) -> int:
    return x


@dramatiq.actor(**_OPTS)
def rpush(x: int) -> int:
    return rpush_one(x)


@dramatiq.actor(**_OPTS)
def sleep_io(x: int) -> int:
    return sleep_one(x)


@dramatiq.actor(**_OPTS)
def stamp(x: int) -> int:
    return record_start(x)


KINDS = {"noop": noop, "rpush": rpush, "sleep": sleep_io, "stamp": stamp}


def enqueue(kind: str, i: int) -> None:
    KINDS[kind].send(i)


def fill(kind: str, n: int) -> None:
    actor = KINDS[kind]
    for i in range(n):
        actor.send(i)


def done_count(r: redis.Redis, n: int) -> int:
    """A message leaves ``<ns>:default.msgs`` when it is acked."""
    return n - int(r.hlen("dramatiq:default.msgs"))


def worker_desc(conc: int | None) -> str:
    return WORKER if conc is None else f"--threads {conc}"


def worker_argv(bindir: Path, conc: int | None, index: int = 0) -> list[str] | None:
    return [str(bindir / "dramatiq"), "dramatiq_peer", "--processes", "1", "--threads", str(conc or THREADS)]
