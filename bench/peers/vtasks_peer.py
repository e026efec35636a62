"""django-vtasks with its Valkey/Redis backend on the bench's redis-server; worker: ``python -m django runworker --concurrency N``.

Its documented worker command (default concurrency 20; sync tasks run in threads). Logging: a console LOGGING for
``django_vtasks`` at INFO (``dtpeer_settings``: a line per task started and per task finished).
"""

from __future__ import annotations

import sys
from pathlib import Path

import dtpeer
import redis

NAME = "vtasks"
PACKAGE = "django-vtasks"
DEFAULT_CONC = 20  # VTASKS_CONCURRENCY's default
WORKER = f"1 process, --concurrency {DEFAULT_CONC} (its default)"
KINDS = dtpeer.setup(NAME)
RESULTS_DEFAULT = False  # it stores no result
RESULTS = RESULTS_DEFAULT
RESULTS_SWITCH = False


def _keys() -> tuple[str, str]:
    from django.tasks import task_backends

    backend = task_backends["default"]
    return backend._get_key("q:default"), backend._get_key("processing:")


QUEUE_KEY, PROCESSING = _keys()  # e.g. "{vt}:q:default", "{vt}:processing:"


def enqueue(kind: str, i: int) -> None:
    KINDS[kind].enqueue(i)


def fill(kind: str, n: int) -> None:
    task = KINDS[kind]
    for i in range(n):
        task.enqueue(i)


def done_count(r: redis.Redis, n: int) -> int:
    """Queued in its queue list, taken in a ``processing:<worker>`` list until the ack (LREM): the rest is done."""
    taken = sum(int(r.llen(k)) for k in r.keys(PROCESSING.replace("{", "\\{").replace("}", "\\}") + "*"))
    return n - int(r.llen(QUEUE_KEY)) - taken


def worker_desc(conc: int | None) -> str:
    return WORKER if conc is None else f"--concurrency {conc}"


def worker_argv(bindir: Path, conc: int | None, index: int = 0) -> list[str] | None:
    return [sys.executable, "-m", "django", "runworker", "--concurrency", str(conc or DEFAULT_CONC)]
