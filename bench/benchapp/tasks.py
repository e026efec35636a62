"""The benchmark's tasks: a no-op, and one that records when it started."""

from __future__ import annotations

import os
import time

import redis

import django_redisq

START_KEY = "bench:start"
_client: redis.Redis | None = None


@django_redisq.task
def noop(x: int) -> int:
    return x


@django_redisq.task
def stamp(x: int) -> int:
    """Record ``"<x> <time.time()>"`` at start, for the enqueue->start latency (one extra RPUSH)."""
    started = time.time()
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"], protocol=2)
    _client.rpush(START_KEY, f"{x} {started!r}")
    return x
