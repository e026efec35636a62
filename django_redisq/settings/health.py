"""Health thresholds of the queues: what ``manage.py redisq health`` checks, and their settings.

A probe that runs every minute (cron, a Kubernetes probe, a monitoring
agent) must cost little and say plainly what is wrong: one
``Inspector.figures`` call (two round trips, O(queues + workers)), one line
per breached threshold. Thresholds come from ``OPTIONS["HEALTH"]``, per queue
with ``"*"`` for every queue, and the command line overrides them::

    "HEALTH": {
        "*": {"MAX_AGE": 300, "MAX_DEAD": 0},          # every queue
        "emails": {"MAX_PENDING": 10000, "MIN_WORKERS": 2},
    }

A threshold left out is not checked. System checks E030-E032 report bad values.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a type only: the settings are read at every worker's start, the figures' shapes are not needed there
    from django_redisq.store.reads.records import QueueFigures

ALL = "*"
THRESHOLDS = {"MAX_PENDING": int, "MAX_AGE": float, "MAX_DEAD": int, "MIN_WORKERS": int}
"""Setting name -> type; each is a bound on one figure of a queue."""


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The bounds of one queue; None is not checked."""

    max_pending: int | None = None
    max_age: float | None = None  # seconds the oldest pending task may wait
    max_dead: int | None = None
    min_workers: int | None = None

    def merged(self, **over: Any) -> Thresholds:
        """These bounds with the given ones (not None) in their place."""
        return Thresholds(**{f.name: over[f.name] if over.get(f.name) is not None else getattr(self, f.name) for f in fields(self)})


def validate_health(where: str, value: Any, queues: Any) -> list[tuple[str, str, str]]:
    """Problems with ``OPTIONS["HEALTH"]`` as ``(check id, message, hint)`` (conf.validate calls this)."""
    hint = 'For example {"*": {"MAX_AGE": 300}, "emails": {"MAX_PENDING": 10000}}.'
    if not isinstance(value, dict):
        return [("E030", f"{where}['HEALTH'] must be a dict of queue name (or '*') -> thresholds.", hint)]
    problems = []
    for q, bounds in value.items():
        if q != ALL and q not in (queues or ()):
            problems.append(("E031", f"{where}['HEALTH'] names {q!r}, which is not in QUEUES.", "Add the queue to QUEUES, or use '*'."))
        if not isinstance(bounds, dict):
            problems.append(("E030", f"{where}['HEALTH'][{q!r}] must be a dict of thresholds.", hint))
            continue
        for name, v in bounds.items():
            kind = THRESHOLDS.get(name)
            if kind is None:
                problems.append(("E032", f"{where}['HEALTH'][{q!r}] has an unknown threshold {name!r}.", f"Thresholds: {', '.join(THRESHOLDS)}."))
            elif isinstance(v, bool) or not isinstance(v, int | float) or (kind is int and not isinstance(v, int)) or v < 0 or v != v:
                problems.append(("E032", f"{where}['HEALTH'][{q!r}][{name!r}] must be a number of at least 0, got {v!r}.",
                                 "MAX_AGE is in seconds (a float is fine); the others are whole numbers."))
    return problems


def configured(health: Any, queue: str) -> Thresholds:
    """The settings' thresholds of ``queue`` ('*' first, then the queue's own); bad values were reported by the checks."""
    if not isinstance(health, dict):
        return Thresholds()
    values: dict[str, Any] = {}
    for part in (health.get(ALL), health.get(queue)):
        if isinstance(part, dict):
            values.update({name.lower(): THRESHOLDS[name](v) for name, v in part.items() if name in THRESHOLDS})
    return Thresholds(**values)


def breaches(f: QueueFigures, t: Thresholds) -> list[str]:
    """One line per threshold ``f`` breaks, naming the queue, the figure and the bound."""
    where = f"queue {f.queue} ({f.alias})"
    out = []
    if t.max_pending is not None and f.pending > t.max_pending:
        out.append(f"{where}: {f.pending} task(s) pending, more than {t.max_pending}")
    if t.max_age is not None and f.oldest_pending_age > t.max_age:
        out.append(f"{where}: the oldest pending task has waited {f.oldest_pending_age:.1f}s, more than {t.max_age:g}s")
    if t.max_dead is not None and f.dead > t.max_dead:
        out.append(f"{where}: {f.dead} dead letter(s), more than {t.max_dead}")
    if t.min_workers is not None and f.workers < t.min_workers:
        out.append(f"{where}: {f.workers} live worker(s), fewer than {t.min_workers}")
    return out
