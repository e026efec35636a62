"""Tasks of the Cluster and Sentinel tests: their effects go to the session's single Redis, which never fails over.

A task of these tests cannot write its effects where its queue lives: the
failover test would lose them with the old master, and a plain client of one
cluster node would be redirected. ``EFFECTS_URL`` (set by the test, or
``REDISQ_TEST_EFFECTS_URL`` in a runworker subprocess) names a steady Redis.
"""

from __future__ import annotations

import os
import time

import redis

from django_redisq import task

EFFECTS = "test:topology:runs"
EFFECTS_URL = os.environ.get("REDISQ_TEST_EFFECTS_URL", "")
_clients: dict[str, redis.Redis] = {}


def effects() -> redis.Redis:
    client = _clients.get(EFFECTS_URL)
    if client is None:
        client = _clients[EFFECTS_URL] = redis.Redis.from_url(EFFECTS_URL, decode_responses=True)
    return client


def runs() -> dict[str, int]:
    """key -> how many times a task of that key ran to its end."""
    return {k: int(v) for k, v in effects().hgetall(EFFECTS).items()}


@task
def mark(key: str, seconds: float = 0.0) -> str:
    if seconds:
        time.sleep(seconds)
    effects().hincrby(EFFECTS, key, 1)
    return key


@task(max_retries=3)
def fails_once(key: str) -> str:
    if effects().hincrby("test:topology:attempts", key, 1) < 2:
        raise ValueError("first attempt fails")
    effects().hincrby(EFFECTS, key, 1)
    return key


@task(max_retries=1)
def always_fails(key: str) -> None:
    raise ValueError(f"{key} fails for good")
