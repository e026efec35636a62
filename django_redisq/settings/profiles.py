"""Named worker profiles: ``OPTIONS["WORKERS"]``, run with ``runworker --profile NAME``.

A deployment usually runs a few kinds of worker (one for the web's urgent
queues, one for the nightly batch); a profile keeps each kind's queues, their
order and its pool in settings, checked at start-up, instead of in a
process manager's command line::

    "WORKERS": {
        "web": {"QUEUES": {"emails": 6, "default": 3, "low": 1}, "CONCURRENCY": 8},
        "batch": {"QUEUES": ["reports", "low"], "POOL": "processes", "CONCURRENCY": 2},
    }

``QUEUES`` as a dict of queue -> weight is the weighted order, as a list the
strict order (worker/fetching/queue_order.py). ``CONCURRENCY``, ``POOL`` and ``PREFETCH`` are
runworker's options of the same names; given on the command line as well,
the command line wins. System checks E040-E046 report a bad profile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django_redisq.core.options import NAME_RE

PROFILE_KEYS = ("QUEUES", "CONCURRENCY", "POOL", "PREFETCH")
POOL_NAMES = ("threads", "processes", "asyncio")
HINT = 'For example {"web": {"QUEUES": {"emails": 6, "default": 3, "low": 1}, "CONCURRENCY": 8}}.'


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    queues: list[str]
    weights: dict[str, int] | None  # None: strict order
    concurrency: int | None = None
    pool: str | None = None
    prefetch: int | None = None

    def queue_arg(self) -> list[str] | dict[str, int]:
        """What ``Worker(queues=...)`` takes: the weights, or the list in strict order."""
        return dict(self.weights) if self.weights is not None else list(self.queues)


def validate_profiles(where: str, value: Any, queues: Any) -> list[tuple[str, str, str]]:
    """Problems with ``OPTIONS["WORKERS"]`` as ``(check id, message, hint)`` (conf.validate calls this)."""
    w = f"{where}['WORKERS']"
    if not isinstance(value, dict):
        return [("E040", f"{w} must be a dict of profile name -> profile.", HINT)]
    problems = []
    for name, profile in value.items():
        p = f"{w}[{name!r}]"
        if not isinstance(name, str) or not NAME_RE.match(name):
            problems.append(("E041", f"{w} has an invalid profile name {name!r}.", "Use 1-100 letters, digits, '_', '-' or '.'."))
        if not isinstance(profile, dict):
            problems.append(("E040", f"{p} must be a dict with QUEUES (and optionally CONCURRENCY, POOL, PREFETCH).", HINT))
            continue
        for key in sorted(set(profile) - set(PROFILE_KEYS), key=str):
            problems.append(("E042", f"{p} has an unknown key {key!r}.", f"Profile keys: {', '.join(PROFILE_KEYS)}."))
        problems += _check_queues(p, profile.get("QUEUES"), queues or ())
        for key in ("CONCURRENCY", "PREFETCH"):
            v = profile.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                problems.append(("E045", f"{p}[{key!r}] must be a whole number of at least 1, got {v!r}.", HINT))
        pool = profile.get("POOL")
        if pool is not None and pool not in POOL_NAMES:
            problems.append(("E046", f"{p}['POOL'] must be one of {', '.join(POOL_NAMES)}, got {pool!r}.", HINT))
    return problems


def _check_queues(p: str, qs: Any, configured: Any) -> list[tuple[str, str, str]]:
    if not isinstance(qs, (list, tuple, dict)) or not qs:
        return [("E043", f"{p}['QUEUES'] must be a non-empty list of queues (strict order) or dict of queue -> weight "
                         "(weighted order).", HINT)]
    problems = []
    names = list(qs)
    for q in names:
        if q not in configured:
            problems.append(("E044", f"{p}['QUEUES'] names {q!r}, which is not in QUEUES.", "Add the queue to QUEUES or remove it."))
    if len(set(map(str, names))) != len(names):
        problems.append(("E043", f"{p}['QUEUES'] names a queue twice.", HINT))
    if isinstance(qs, dict):
        for q, weight in qs.items():
            try:
                parse_weight(weight, str(q))
            except ValueError:
                problems.append(("E045", f"{p}['QUEUES'][{q!r}]: a weight must be a whole number from 1 to {MAX_WEIGHT}, "
                                         f"got {weight!r}.", HINT))
    return problems


def get_profile(workers: Any, name: str) -> Profile:
    """The profile ``name`` of (valid) ``OPTIONS["WORKERS"]``; ``LookupError`` naming the ones there are."""
    if not isinstance(workers, dict) or name not in workers:
        known = ", ".join(sorted(workers)) if isinstance(workers, dict) and workers else "none"
        raise LookupError(f"no worker profile {name!r} in OPTIONS['WORKERS'] (profiles: {known})")
    raw = workers[name]
    qs = raw["QUEUES"]
    weights = {q: parse_weight(v, q) for q, v in qs.items()} if isinstance(qs, dict) else None
    return Profile(name, list(qs), weights, raw.get("CONCURRENCY"), raw.get("POOL"), raw.get("PREFETCH"))


MAX_WEIGHT = 1000
"""The largest weight a queue may have in a weighted order (``emails:6 default:3``)."""


def parse_queue_args(args: Sequence[str]) -> tuple[list[str], dict[str, int] | None]:
    """``["emails:6", "default:3"]`` -> (queues, weights); ``["a", "b"]`` -> (queues, None): strict.

    Raises ``ValueError`` with what is wrong: a weight that is not a whole
    number from 1 to MAX_WEIGHT, a queue named twice, or weights given to
    some queues and not others (the two orders do not mix).
    """
    queues: list[str] = []
    weights: dict[str, int] = {}
    for arg in args:
        name, sep, weight = arg.rpartition(":") if ":" in arg else (arg, "", "")
        if not NAME_RE.match(name):
            raise ValueError(f"{arg!r}: not a queue name (1-100 letters, digits, '_', '-' or '.')")
        if name in queues:
            raise ValueError(f"queue {name!r} is named twice")
        queues.append(name)
        if sep:
            weights[name] = parse_weight(int(weight) if weight.isascii() and weight.isdigit() else weight, arg)
    if weights and len(weights) != len(queues):
        unweighted = [q for q in queues if q not in weights]
        raise ValueError(f"give every queue a weight (emails:6 default:3) or none (strict order); {', '.join(unweighted)} "
                         "has none")
    return queues, weights or None


def parse_weight(value: object, where: str) -> int:
    """A queue weight: a whole number from 1 to MAX_WEIGHT (``ValueError`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WEIGHT:
        raise ValueError(f"{where!r}: a queue's weight must be a whole number from 1 to {MAX_WEIGHT}, got {value!r}")
    return value
