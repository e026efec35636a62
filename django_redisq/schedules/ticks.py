"""What one tick of a periodic schedule enqueues: its task id, message, priority and limits.

Shared by the worker's scheduler (worker/background/scheduler.py), which fires ticks, and by
"run now" (ops/operations.py), which enqueues one by hand: both must build the
same task for a schedule, so it is built here, from the settings alone.
"""

from __future__ import annotations

import hashlib
import inspect

from django_redisq.core.limits import task_limits
from django_redisq.core.message import encode as encode_message
from django_redisq.schedules.registry import TICK_KWARG, Schedule, find_task

MARKER_TTL_MS = 7 * 86_400_000
"""A marker lives at least this long after its last claim (and 3 periods, if longer)."""


def id_base(s: Schedule) -> str:
    """Task ids of a schedule's ticks are ``p<digest>-<tick ms>``: one per (schedule, tick); a "run now" is ``p<digest>-m<random>``."""
    return "p" + hashlib.sha256(f"{s.queue}:{s.name}".encode()).hexdigest()[:12] + "-"


def wants_tick(s: Schedule) -> bool:
    """Whether the schedule's task function takes the ``periodic_tick`` keyword."""
    return TICK_KWARG in inspect.signature(find_task(s.task).func).parameters


def task_priority(s: Schedule) -> int:
    """The priority the schedule's task was defined with (``@task(priority=...)``), which its ticks run at."""
    priority = getattr(find_task(s.task), "priority", 0)
    return priority if isinstance(priority, int) and not isinstance(priority, bool) and -100 <= priority <= 100 else 0


def own_limits(s: Schedule) -> str:
    """The fleet-wide limits the schedule's task was defined with (``max_running``, ``rate_limit``), which its ticks obey."""
    return task_limits(find_task(s.task))


def tick_message(s: Schedule, tick: int, wants: bool) -> str:
    """The message of the schedule's task for ``tick`` (Redis ms): its args and kwargs, and the tick if it takes it."""
    kwargs = {**s.kwargs, TICK_KWARG: s.tick_text(tick)} if wants else s.kwargs
    return encode_message(s.args, kwargs)


def marker_ttl_ms(s: Schedule, now: int) -> int:
    """How long the schedule's marker lives after a change at ``now`` (fire.lua's ARGV[7])."""
    latest = s.latest_at(now)
    return max(MARKER_TTL_MS, 3 * s.period_at(latest)) if latest is not None else MARKER_TTL_MS
