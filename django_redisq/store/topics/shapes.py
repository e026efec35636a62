"""What a topic's steps hand back: entries read, a group's figures, a recreated group; stream ids' arithmetic."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

MAX_ID_SEQ = 18446744073709551615


@dataclass(frozen=True, slots=True)
class Regrouped:
    """A subscription's consumer group found deleted (an operator's XGROUP DESTROY, or the stream deleted) and
    recreated at ``at``, where the subscription had acknowledged everything before ('0': not known, every retained
    entry). Entries it had turned into tasks already keep their task ids (same generation): not run twice while their
    task records live (RESULT_TTL)."""

    group: str
    at: str


class NoSuchGroup(LookupError):
    """The subscription's consumer group does not exist (no worker or publish has created it yet)."""


@dataclass(slots=True)
class Entry:
    """One stream entry read for a subscription: its id, the raw payload field, how often it was delivered,
    and the raw trace field (``tc``: the publisher's trace context as JSON, core/tracing.py; ``""`` when it has none)."""

    id: str
    payload: str
    deliveries: int = 1
    trace: str = ""


@dataclass(slots=True)
class Read:
    """What one read or claim window returned."""

    generation: int
    entries: list[Entry]
    top: str = "0-0"  # the stream's newest id when nothing was new (read)
    cursor: str = "0-0"  # where the next claim window starts ('0-0': walked)
    trimmed: int = 0


@dataclass(slots=True)
class GroupStats:
    """What operators see of one subscription's group."""

    exists: bool
    lag: int = 0
    lag_exact: bool = True
    pending: int = 0
    oldest_pending_id: str = ""
    last_delivered: str = ""
    generation: int = 0
    dropped: int = 0
    regrouped: int = 0  # times its group was found deleted and recreated (lib/topic_group.lua)
    consumers: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def id_ms(entry_id: str) -> int:
    """The Redis time (ms) an entry id was made at."""
    return int(entry_id.partition("-")[0] or 0)


def before(entry_id: str) -> str:
    """The id just below ``entry_id``: a group set there delivers ``entry_id`` next."""
    ms, _, seq = entry_id.partition("-")
    if int(seq or 0) > 0:
        return f"{ms}-{int(seq) - 1}"
    return f"{int(ms) - 1}-{MAX_ID_SEQ}" if int(ms) > 0 else "0-0"


class Trimmed(NamedTuple):
    """topic_trim.lua's answer: entries removed by retention, entries dropped by the hard cap."""

    retention: int
    hard_cap: int
