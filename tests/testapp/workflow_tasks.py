"""Tasks for the workflow tests (tests/workflows/): each run is recorded in the queue's Redis.

``wf:runs`` (LIST): ``<task id>|<name>|<args JSON>`` per run that completed, in completion
order, so a test can see that a step ran once and after its parents, also across processes.
"""

from __future__ import annotations

import json
import os
import time

import redis

from django_redisq import task

_clients: dict[int, redis.Redis] = {}


def runs_store() -> redis.Redis:
    client = _clients.get(os.getpid())
    if client is None:
        from django.conf import settings

        url = os.environ.get("REDISQ_WF_EFFECTS_URL") or settings.TASKS["default"]["OPTIONS"]["REDIS_URL"]
        client = _clients[os.getpid()] = redis.Redis.from_url(url, decode_responses=True)
    return client


def _record(context, name: str, *args) -> None:  # type: ignore[no-untyped-def]
    runs_store().rpush("wf:runs", f"{context.task_result.id}|{name}|{json.dumps(list(args))}")


@task(takes_context=True)
def add(context, a: int, b: int = 0) -> int:  # type: ignore[no-untyped-def]
    _record(context, "add", a, b)
    return a + b


@task(takes_context=True, queue_name="emails")
def double(context, x: int) -> int:  # type: ignore[no-untyped-def]
    _record(context, "double", x)
    return x * 2


@task(takes_context=True)
def total(context, values: list, extra: int = 0) -> int:  # type: ignore[no-untyped-def]
    _record(context, "total", values, extra)
    return sum(values) + extra


@task(takes_context=True)
def tag(context, *args) -> str:  # type: ignore[no-untyped-def]
    _record(context, "tag", *args)
    return "tag"


@task(takes_context=True)
def slow(context, seconds: float, value: int = 0) -> int:  # type: ignore[no-untyped-def]
    time.sleep(seconds)
    _record(context, "slow", seconds, value)
    return value


@task(takes_context=True, max_retries=1)
def fails_unless(context, key: str, value: int = 0) -> int:  # type: ignore[no-untyped-def]
    """Fails until ``wf:fix:<key>`` is set in Redis (then the replay succeeds)."""
    if not runs_store().exists(f"wf:fix:{key}"):
        raise ValueError(f"broken {key}")
    _record(context, "fails_unless", key, value)
    return value


@task(takes_context=True)
def on_failure(context, note: str, workflow_id: str, failed_task_id: str) -> str:  # type: ignore[no-untyped-def]
    _record(context, "on_failure", note, workflow_id, failed_task_id)
    return "handled"


@task(takes_context=True)
def huge(context) -> str:  # type: ignore[no-untyped-def]
    return "x" * 300


def runs() -> list[tuple[str, str, list]]:
    """Every recorded run: (task id, name, args)."""
    out = []
    for line in runs_store().lrange("wf:runs", 0, -1):
        tid, name, args = line.split("|", 2)
        out.append((tid, name, json.loads(args)))
    return out


@task(takes_context=True)
def sized(context, n: int) -> str:  # type: ignore[no-untyped-def]
    """A result of ``n`` characters (a chord of these can outgrow its callback's MAX_MESSAGE_BYTES)."""
    _record(context, "sized", n)
    return "x" * n


@task(takes_context=True)
def lone_surrogate(context) -> str:  # type: ignore[no-untyped-def]
    """Returns text Redis cannot store: a lone surrogate, as ``json.loads('"\\ud800"')`` yields from outside JSON."""
    _record(context, "lone_surrogate")
    return json.loads('"a\\ud800b"')
