"""Tasks for the fault-injection runs (bench/chaos.py, tests/worker/test_chaos.py) and bad-input tests.

Each chaos task records what it did in a store *separate* from the queue's
Redis (a second redis-server, ``REDISQ_CHAOS_EFFECTS_URL``), so the queue's own
faults (restarts, pauses, killed connections) cannot hide or fake an effect:

* ``chaos:starts`` (LIST): one ``<id>|<ms>|<worker>|<pid>`` entry each time a run begins
  (pushed in one MULTI with the ``chaos:attempts`` increment, so a task's n-th entry is its attempt n);
* ``chaos:ends`` (LIST): one ``<id>|<attempt>|<ms>|<pid>`` entry each time a run ends, by
  success or by raising (a run frozen with SIGSTOP ends after SIGCONT; a SIGKILLed one never);
* ``chaos:effects`` (HASH): task id -> number of runs that completed their effect;
* ``chaos:attempts`` (HASH): task id -> number of runs begun (drives fail-then-succeed);
* ``chaos:orders`` (HASH): business key -> number of times its effect happened.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from django_redisq import task

_local = threading.local()


def effects_store() -> redis.Redis:
    client = getattr(_local, "client", None)
    if client is None or getattr(_local, "pid", None) != os.getpid():
        url = os.environ.get("REDISQ_CHAOS_EFFECTS_URL")
        if not url:
            from django.conf import settings

            url = settings.TASKS["default"]["OPTIONS"]["REDIS_URL"]
        client = _local.client = redis.Redis.from_url(url, decode_responses=True, socket_timeout=30)
        _local.pid = os.getpid()
    return client


@contextmanager
def _run(context) -> Iterator[tuple[redis.Redis, str, int]]:  # type: ignore[no-untyped-def]
    """Record the run's start (and attempt number) before the body, its end after it."""
    store = effects_store()
    result = context.task_result
    worker = result.worker_ids[-1] if result.worker_ids else "?"
    pipe = store.pipeline(transaction=True)
    pipe.rpush("chaos:starts", f"{result.id}|{int(time.time() * 1000)}|{worker}|{os.getpid()}")
    pipe.hincrby("chaos:attempts", result.id, 1)
    attempt = int(pipe.execute()[1])
    try:
        yield store, result.id, attempt
    finally:
        store.rpush("chaos:ends", f"{result.id}|{attempt}|{int(time.time() * 1000)}|{os.getpid()}")


@task(takes_context=True)
def chaos_quick(context, n: int) -> int:  # type: ignore[no-untyped-def]
    with _run(context) as (store, tid, _):
        store.hincrby("chaos:effects", tid, 1)
    return n


LIMIT = 3
"""chaos_limited's max_running: at most this many run at once across the fleet (a crash may explain more)."""


@task(takes_context=True, max_running=LIMIT, max_retries=3)
def chaos_limited(context, n: int) -> int:  # type: ignore[no-untyped-def]
    """A short run under a fleet-wide limit of 3: its slots must all come back, whatever the faults."""
    with _run(context) as (store, tid, _):
        time.sleep(0.05)
        store.hincrby("chaos:effects", tid, 1)
    return n


@task(takes_context=True, queue_name="emails")
def chaos_slow(context, n: int, seconds: float) -> int:  # type: ignore[no-untyped-def]
    with _run(context) as (store, tid, _):
        time.sleep(seconds)
        store.hincrby("chaos:effects", tid, 1)
    return n


@task(takes_context=True, max_retries=3)
def chaos_flaky(context, n: int, fail_times: int) -> int:  # type: ignore[no-untyped-def]
    """Fails its first ``fail_times`` runs, then succeeds (attempts counted in the effects store)."""
    with _run(context) as (store, tid, attempts):
        if attempts <= fail_times:
            raise RuntimeError(f"designed failure {attempts} of {fail_times}")
        store.hincrby("chaos:effects", tid, 1)
    return n


@task(takes_context=True, max_retries=2)
def chaos_fail(context, n: int) -> None:  # type: ignore[no-untyped-def]
    """Always fails: after 3 runs it is a designed dead letter."""
    with _run(context):
        raise ValueError(f"designed permanent failure {n}")


@task(takes_context=True, idempotency_key=lambda order: f"chaos-order-{order}")
def chaos_order(context, order: str) -> str:  # type: ignore[no-untyped-def]
    """A business effect guarded by a user idempotency key (one charge per order)."""
    with _run(context) as (store, tid, _):
        pipe = store.pipeline(transaction=False)
        pipe.hincrby("chaos:effects", tid, 1)
        pipe.hincrby("chaos:orders", order, 1)
        pipe.execute()
    return order


@task(max_retries=1)
def fails_with_undecodable_name() -> None:
    """Raises with text as Python decodes a non-UTF-8 file name (os.fsdecode: a lone surrogate)."""
    raise ValueError("cannot open " + os.fsdecode(b"caf\xe9.txt"))
