"""What the broker's steps take and hand back: a task to store, a delivery, an enqueue's answer, a recovered task.

Plain values, parsed here from the scripts' replies (fetch.lua's rows, reap.lua's
hand-backs) with the checks that keep a field another producer wrote badly from
crashing a worker: such a delivery is CORRUPT and buried with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django_redisq.exceptions import TaskCancelled

RUN, DONE, BUSY, NOMSG, CORRUPT, LIMITED = 1, 2, 3, 4, 5, 6

CANCELLED = "cancelled"
"""The dead-letter reason of a cancelled task: the reason a worker buries a task it stopped with."""
CANCELLED_EXC = f"{TaskCancelled.__module__}.{TaskCancelled.__qualname__}"
"""Its error's exception class path (store/scripts/lib/cancel.lua spells the same)."""


def cancelled_error(who: str, traceback: str = "") -> dict[str, Any]:
    """The error a cancelled task is dead-lettered with: ``{"exc": CANCELLED_EXC, "msg": "cancelled by <who>", ...}``.

    The scripts that bury a cancelled task themselves (cancel, retry, reap, release)
    record the same; a worker that stopped one passes this (or ``runner.error_dict`` of
    the ``TaskCancelled`` it raised) to ``bury(..., reason=CANCELLED, failed=False)``.
    """
    msg = f"cancelled by {who}"
    return {"exc": CANCELLED_EXC, "msg": msg, "tb": traceback or f"{CANCELLED_EXC}: {msg}", "at": 0}


@dataclass(slots=True)
class Delivery:
    """A task a worker has taken: what fetch.lua returned for one id."""

    id: str
    queue: str
    code: int
    raw: str
    deliveries: int
    failures: int
    workers: str = ""
    enqueued_at: int = 0
    started_at: int = 0
    task: str = ""  # the dotted path stored beside the message
    metadata: str = ""  # the metadata last saved (JSON as stored; '' = none: the message's "m" holds it)
    problem: str = ""  # why a CORRUPT delivery cannot run


MAX_MS = 253_402_300_799_999
"""The last millisecond of the year 9999: a larger stored time is not a Redis millisecond time."""


def parse_ms(value: Any, field: str) -> int:
    """A stored Redis millisecond time ('' or missing = 0); ``ValueError`` naming the field if it is not one."""
    if value in (None, "", 0):
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        n = int(value)
    else:
        raise ValueError(f"{field} {str(value)[:40]!r} is not a time in Redis milliseconds")
    if not 0 <= n <= MAX_MS:
        raise ValueError(f"{field} {n} is not a time in Redis milliseconds (microseconds or seconds written by another producer?)")
    return n


def delivery(queue: str, row: Sequence[Any]) -> Delivery:
    """One fetch.lua row as a Delivery; a field that does not parse makes it CORRUPT (buried with the reason)."""
    task_id, code, raw, deliveries, failures, workers, enqueued_at, started_at, task, metadata = row
    d = Delivery(task_id, queue, int(code), raw, 0, 0, workers if isinstance(workers, str) else "", task=task if isinstance(task, str) else "",
                 metadata=metadata if isinstance(metadata, str) else "")
    try:
        d.deliveries, d.failures = int(deliveries), int(failures)
        d.enqueued_at = parse_ms(enqueued_at, "enqueued_at")
        d.started_at = parse_ms(started_at, "started_at")
    except (TypeError, ValueError) as exc:
        d.code, d.problem = CORRUPT, str(exc)
    return d


@dataclass(frozen=True, slots=True)
class Recovered:
    """A task reap.lua handed back to pending after its worker died (``task_recovered`` tells of each)."""

    id: str
    queue: str
    worker: str  # the dead worker that held it
    task: str  # the dotted path stored beside the message ('' when unknown)
    deliveries: int  # deliveries so far, the one that died included


NewTask = tuple[str, str, str, int, str] | tuple[str, str, str, int, str, int] | tuple[str, str, str, int, str, int, str]
"""A task to store: id, message, task path, delay ms, idempotency key ('' = none), priority (0 if left out), and
its own fleet-wide limits ('' if left out; see limits.task_limits)."""
DEFAULTS = (0, "")


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: str
    duplicate_of: str | None  # set when an idempotency key was already held
    enqueued_at: int = 0  # Redis ms, as stored in the task hash (what get_result reports)
