"""The benchmark's tasks: a no-op, one that records when it started, and the pool workloads.

The pool workloads (``bench/run.py``'s ``pools`` section): ``noop``; ``io_sleep``,
an ``async def`` awaiting ``asyncio.sleep(0.01)`` (I/O-bound); ``cpu``, a
pure-Python loop of ``CPU_LOOPS`` iterations (CPU-bound: 75,000 iterations
took 5.0 ms at best, Python 3.13 on the 2-core bench machine; set
``BENCH_CPU_LOOPS`` to recalibrate elsewhere). ``cpu_first`` is ``cpu`` that says when each process ran its first one
(the ``cpu-bound`` section). ``astamp`` is ``stamp`` as an
``async def``, for the asyncio pool's native path.

The task kinds of the drain section and the peers (``common.py``, the same body
in every queue measured): ``noop``; ``rpush``, one Redis round trip (``RPUSH``
to a list on the bench's redis-server, one client per worker process, made on
first use); ``sleep_io``, ``time.sleep(0.001)`` (an I/O stand-in).
"""

from __future__ import annotations

import asyncio
import os

from common import record_start, rpush_one, sleep_one

import django_redisq

CPU_LOOPS = int(os.environ.get("BENCH_CPU_LOOPS", "75000"))
IO_SLEEP = 0.01


@django_redisq.task
def noop(x: int) -> int:
    return x


def limited_noop(x: int) -> int:
    """A no-op under a fleet-wide limit that never binds: the cost of the limit's bookkeeping alone."""
    return x


try:
    limited_noop = django_redisq.task(max_running=1000)(limited_noop)  # type: ignore[assignment]
except Exception:  # noqa: BLE001 - an older engine (bench/run.py --engine) without fleet-wide limits
    pass


@django_redisq.task
def rpush(x: int) -> int:
    return rpush_one(x)


@django_redisq.task
def sleep_io(x: int) -> int:
    return sleep_one(x)


@django_redisq.task
def stamp(x: int) -> int:
    return record_start(x)


@django_redisq.task
def hold(seconds: float) -> float:
    """A long task that records nothing (the ``hoarding`` section keeps a worker's threads busy with it)."""
    import time

    time.sleep(seconds)
    return seconds


@django_redisq.task
async def astamp(x: int) -> int:
    return record_start(x)


@django_redisq.task
async def io_sleep(x: int) -> int:
    await asyncio.sleep(IO_SLEEP)
    return x


def burn(n: int = CPU_LOOPS) -> int:
    s = 0
    for i in range(n):
        s += i * i
    return s


@django_redisq.task
def cpu(x: int) -> int:
    burn()
    return x


FIRST_KEY = "bench:first"
_first_done = False


@django_redisq.task
def cpu_first(x: int) -> int:
    """``cpu``, and the first call in each process pushes ``"<pid> <time.time()>"`` to FIRST_KEY (when a child began)."""
    global _first_done
    if not _first_done:
        _first_done = True
        record_first()
    burn()
    return x


def record_first() -> None:
    import time

    import redis

    redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]).rpush(FIRST_KEY, f"{os.getpid()} {time.time()!r}")
