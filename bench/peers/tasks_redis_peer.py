"""django-tasks-redis (Redis Streams, a consumer group); worker: ``python -m django run_redis_tasks --continuous``.

Its worker runs one task at a time (``--concurrency`` above 1 is not measured); its default polling interval
(1 s) is kept. Logging: a console LOGGING for ``django_tasks_redis`` at INFO (``dtpeer_settings``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import dtpeer
import redis

NAME = "tasks-redis"
PACKAGE = "django-tasks-redis"
WORKER = "1 process, one task at a time"
KINDS = dtpeer.setup(NAME)
RESULTS_DEFAULT = True  # its task hash and status index
RESULTS = RESULTS_DEFAULT
RESULTS_SWITCH = False
DONE_KEY = "django_tasks:default:status_index:SUCCESSFUL"  # its status index: a task's id, when it succeeded


def enqueue(kind: str, i: int) -> None:
    KINDS[kind].enqueue(i)


def fill(kind: str, n: int) -> None:
    task = KINDS[kind]
    for i in range(n):
        task.enqueue(i)


def done_count(r: redis.Redis, n: int) -> int:
    return int(r.zcard(DONE_KEY))


def worker_desc(conc: int | None) -> str:
    return WORKER


def worker_argv(bindir: Path, conc: int | None, index: int = 0) -> list[str] | None:
    if conc not in (None, 1):
        return None
    return [sys.executable, "-m", "django", "run_redis_tasks", "--continuous"]
