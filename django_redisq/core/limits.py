"""Fleet-wide limits, the Python side: what ``max_running`` and ``rate_limit`` mean, and their checks.

The limits themselves live in Redis (store/scripts/lib/limits.lua, invariant 12 (docs/explanation/architecture.md)):
a task's own come with it (the task hash's ``maxr`` and ``rate``, written at
enqueue from ``@task(max_running=3, rate_limit="10/s")``), a queue's come from
``QUEUE_OPTIONS[q]["MAX_RUNNING"]`` / ``["RATE_LIMIT"]`` and are passed by the
worker with each fetch. Both apply: a task starts only when every limit on it
allows. Concurrency is counted in slots that the claim takes and the settle,
the hand-back or the reaper frees; a rate limit spaces starts evenly, one every
``period / count``, on the Redis clock.
"""

from __future__ import annotations

import re
from typing import Any

UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
RATE_RE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*$")
"""``"10/s"``, ``"100/m"``, ``"5/h"``, ``"1/d"``; a period may have a count too: ``"3/10s"``."""
MAX_RUNNING_MAX = 10_000
"""Slots are checked one by one when a limit is reached, so the limit stays modest."""


def parse_rate(value: Any) -> tuple[int, int]:
    """``(count, period in ms)`` of a rate limit; ``ValueError`` with what is wrong."""
    if not isinstance(value, str):
        raise ValueError(f"rate_limit must be a string such as '10/s' or '100/m', got {value!r}")
    m = RATE_RE.match(value)
    if not m:
        raise ValueError(f"rate_limit {value!r} is not '<count>/<unit>' (units s, m, h, d; e.g. '10/s', '100/m', '3/10s')")
    count, per, unit = int(m.group(1)), int(m.group(2) or 1), m.group(3)
    period = per * UNITS[unit]
    if count < 1 or per < 1:
        raise ValueError(f"rate_limit {value!r}: the count and the period must be at least 1")
    if period / count < 1:
        raise ValueError(f"rate_limit {value!r} allows more than one start per millisecond, the Redis clock's unit")
    return count, period


def rate_spec(value: str | None) -> str:
    """The ``count|period ms`` form the scripts read ('' for none)."""
    if not value:
        return ""
    count, period = parse_rate(value)
    return f"{count}|{period}"


def check_max_running(value: Any) -> str | None:
    """What is wrong with a ``max_running`` / ``MAX_RUNNING`` value, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RUNNING_MAX:
        return f"must be a whole number from 1 to {MAX_RUNNING_MAX}, got {value!r}"
    return None


def check_rate(value: Any) -> str | None:
    """What is wrong with a ``rate_limit`` / ``RATE_LIMIT`` value, or None."""
    if value is None:
        return None
    try:
        parse_rate(value)
    except ValueError as exc:
        return str(exc)
    return None


def task_limits(task: Any) -> str:
    """A task's own limits as enqueue.lua stores them: ``'<max_running>|<count>|<period ms>'``, or '' for none."""
    maxr, rate = getattr(task, "max_running", None), getattr(task, "rate_limit", None)
    if not maxr and not rate:
        return ""
    return f"{maxr or ''}|{rate_spec(rate)}"
