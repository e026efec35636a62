"""What the broker's steps take and hand back: a task to store, a delivery, an enqueue's answer, a reaping.

Named values, each built here from its script's reply (fetch.lua's rows, reap.lua's
hand-backs, ...) with the checks that keep a field another producer wrote badly from
crashing a worker: such a delivery is CORRUPT and buried with the reason. The
replies that are pairs or triples are named tuples, so a caller may still unpack them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

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
    plain: bool = False  # no idempotency key and no limit's slot: its ack writes the hash without reading it first


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


class FetchRow(NamedTuple):
    """One task of fetch.lua's reply, which is these fields for each id it took, back to back."""

    id: Any
    code: Any
    raw: Any
    deliveries: Any
    failures: Any
    workers: Any
    enqueued_at: Any
    started_at: Any
    task: Any
    metadata: Any
    plain: Any  # '1': no idempotency key and no limit's slot (ack.lua writes its hash without reading it)


FETCH_ROW = len(FetchRow._fields)
"""How many entries of fetch.lua's reply each task takes."""


def delivery(queue: str, row: FetchRow) -> Delivery:
    """One fetch.lua row as a Delivery; a field that does not parse makes it CORRUPT (buried with the reason)."""
    d = Delivery(row.id, queue, int(row.code), row.raw, 0, 0, row.workers if isinstance(row.workers, str) else "",
                 task=row.task if isinstance(row.task, str) else "",
                 metadata=row.metadata if isinstance(row.metadata, str) else "", plain=row.plain == "1")
    try:
        d.deliveries, d.failures = int(row.deliveries), int(row.failures)
        d.enqueued_at = parse_ms(row.enqueued_at, "enqueued_at")
        d.started_at = parse_ms(row.started_at, "started_at")
    except (TypeError, ValueError) as exc:
        d.code, d.problem = CORRUPT, str(exc)
    return d


def deliveries(queue: str, reply: Sequence[Any]) -> list[Delivery]:
    """fetch.lua's reply of tasks taken (not a refusal: see ``Broker.fetch``) as one Delivery each."""
    return [delivery(queue, FetchRow._make(reply[i : i + FETCH_ROW])) for i in range(0, len(reply), FETCH_ROW)]


@dataclass(frozen=True, slots=True)
class Recovered:
    """A task reap.lua handed back to pending after its worker died (``task_recovered`` tells of each)."""

    id: str
    queue: str
    worker: str  # the dead worker that held it
    task: str  # the dotted path stored beside the message ('' when unknown)
    deliveries: int  # deliveries so far, the one that died included


class NewTask(NamedTuple):
    """A task to store (enqueue.lua's ARGV for one task, in this order): built by whoever enqueues, read by the broker."""

    id: str
    message: str  # the message JSON (core/message.py)
    task: str  # the task's dotted path
    delay_ms: int = 0  # relative to Redis time; 0: pending at once
    idem: str = ""  # the idempotency key ('' = none)
    priority: int = 0  # Django's priority (-100..100)
    limits: str = ""  # its own fleet-wide limits ('' = none; see core/limits.task_limits)


@dataclass(frozen=True, slots=True)
class Enqueued:
    id: str
    duplicate_of: str | None  # set when an idempotency key was already held
    enqueued_at: int = 0  # Redis ms, as stored in the task hash (what get_result reports)


class Reaped(NamedTuple):
    """What reap.lua gave back: how many tasks, of which workers, and each task (``task_recovered`` tells of it)."""

    tasks: int
    workers: list[str]
    recovered: list[Recovered]

    @classmethod
    def of(cls, queue: str, reply: Sequence[Any]) -> Reaped:
        if len(reply) == 2 and reply[1] == -1:  # this reaper may not reap yet (its own run is too short)
            return cls(0, [], [])
        back = reply[1]
        recovered = [Recovered(back[i], queue, back[i + 1], back[i + 2], int(back[i + 3] or 0)) for i in range(0, len(back), 4)]
        return cls(int(reply[0]), list(reply[2:]), recovered)


class Promoted(NamedTuple):
    """promote.lua's answer: how many due tasks became pending, and ms until the next is due (-1: none scheduled)."""

    moved: int
    wait_ms: int
