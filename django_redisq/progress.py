"""Progress from a running task: ``report_progress(done, total, message="")`` and ``Progress``, what is read back.

Inside a task run by a worker, ``report_progress`` stores how far the task got
with the task itself (the ``progress`` field of its task hash, written by
``store/scripts/progress.lua``), so it lives and expires with the task and is
read by id like its result: ``get_progress(id_or_result)`` /
``aget_progress(...)`` (in ``backend/by_alias.py``), the admin's task page and
``manage.py redisq task ID``.

A tight loop cannot flood Redis: the worker's writer (``worker/running/progress.py``)
stores at most one report per ``INTERVAL`` seconds per task, and keeps the
latest one it held back for the end of the attempt, so what is read at last is
what the task reported last. The first report, and one with ``done >= total``,
are written at once.

Outside a worker (``task.call()`` in a unit test, Django's ImmediateBackend)
there is no task to store it with, and ``report_progress`` does nothing. Bad
values raise ``TypeError`` / ``ValueError`` in the task, whatever the context,
so a mistake shows in the unit test too.

This module is part of the vocabulary: it imports nothing that talks to Redis.
The worker puts its writer in ``current`` (a context variable) for the attempt.
"""

from __future__ import annotations

import json
import math
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

INTERVAL = 0.5
"""Seconds between two stored reports of one task (the last one is stored when the attempt ends)."""
MESSAGE_MAX = 200
"""Characters a progress message may have."""


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a task got, as it last reported (and was stored)."""

    done: float
    total: float
    message: str = ""
    attempt: int = 0  # the attempt that reported it (1 for the first)
    updated_at: datetime | None = None  # when it was stored, by the Redis clock

    @property
    def fraction(self) -> float:
        """``done / total`` between 0 and 1 (1 when total is 0: nothing to do is done)."""
        if self.total <= 0:
            return 1.0
        return max(0.0, min(1.0, self.done / self.total))

    @property
    def percent(self) -> int:
        """The fraction in whole per cent, for a bar."""
        return int(self.fraction * 100)

    def as_dict(self) -> dict[str, Any]:
        return {"done": self.done, "total": self.total, "message": self.message, "attempt": self.attempt,
                "percent": self.percent, "updated_at": self.updated_at.isoformat() if self.updated_at else None}


class Reporter(Protocol):
    """What the worker puts in ``current`` for a running attempt (``worker/running/progress.py``)."""

    def report(self, done: float, total: float, message: str) -> None: ...


current: ContextVar[Reporter | None] = ContextVar("django_redisq_progress", default=None)
"""The running attempt's writer; None outside a worker."""


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"report_progress(): {name} must be a finite number >= 0, got {value!r}")
    return value


def check(done: Any, total: Any, message: Any) -> tuple[float, float, str]:
    """The report's values, or ``TypeError`` / ``ValueError`` saying which is wrong."""
    done, total = _number(done, "done"), _number(total, "total")
    if not isinstance(message, str):
        raise TypeError(f"report_progress(): message must be a str, got {type(message).__name__}")
    if len(message) > MESSAGE_MAX:
        raise ValueError(f"report_progress(): message is {len(message)} characters; at most {MESSAGE_MAX}")
    return done, total, message


def report_progress(done: float, total: float, message: str = "") -> None:
    """Report how far the running task got: ``done`` of ``total`` (any unit: rows, bytes, steps), with a short message.

    Call it as often as you like: at most one report per ``INTERVAL`` seconds is
    stored, and the last one when the attempt ends. Does nothing outside a worker.
    """
    done, total, message = check(done, total, message)
    reporter = current.get()
    if reporter is not None:
        reporter.report(done, total, message)


def encode(done: float, total: float, message: str, attempt: int) -> str:
    """The stored form: compact JSON (``progress.lua`` adds the time it was stored)."""
    return json.dumps({"done": done, "total": total, "message": message, "attempt": attempt}, separators=(",", ":"),
                      ensure_ascii=False)


def decode(raw: Any, stored_at: datetime | None = None) -> Progress | None:
    """A stored report, or None (none stored, or one that does not read: it is only a display)."""
    if not raw:
        return None
    try:
        data = json.loads(raw)
        done, total = _number(data["done"], "done"), _number(data["total"], "total")
        message, attempt = str(data.get("message", ""))[:MESSAGE_MAX], int(data.get("attempt", 0))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    return Progress(done, total, message, attempt, stored_at)
