"""A task's keys: per-key limits, fairness, debounce and throttle, the Python side (no I/O).

``limit_key`` makes a task's own ``max_running`` and ``rate_limit`` count per key
(store/scripts/lib/limits.lua: the slots, blocked list and rate key of
``<task path>#<key>``); ``fair_key`` names the key a FAIR queue serves round-robin
(lib/fair.lua); ``debounce`` and ``throttle`` give the call's idempotency key a window
(lib/store.lua). A key is a string, or a function of the call's arguments returning one,
so ``@task(limit_key=lambda account_id, **kw: account_id)`` keys each call by its account.

What travels to Redis is one argument of enqueue.lua, the task's "limits": '' for a task
with none of these (the common case, sent by plain.py without a script), today's
``<max_running>|<count>|<period ms>`` for a task with limits only, else a small JSON
object (``own_spec`` in lib/store.lua reads it). Keeping it one argument keeps every
enqueue path (enqueue, fire, schedule_run, enqueue_again) on one ARGV layout.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

from django_redisq.core.limits import rate_spec

KEY_OPTIONS = ("limit_key", "fair_key")
"""The options naming a key: a string of 1-200 characters, or a callable of the call's arguments returning one."""
WINDOW_OPTIONS = ("debounce", "throttle")
"""The options giving the idempotency key a window, in seconds."""
KEY_MAX = 200
"""Characters a key may have: it is part of Redis key names."""
WINDOW_MAX = 86_400.0
"""A window of at most a day: a debounced task waits that long, a throttle key lives that long."""


def check_key(name: str, value: Any) -> str | None:
    """What is wrong with a ``limit_key`` / ``fair_key`` value, or None."""
    if value is None or callable(value) or (isinstance(value, str) and 0 < len(value) <= KEY_MAX):
        return None
    return f"{name} must be a callable of the task's arguments or a string of 1-{KEY_MAX} characters, got {value!r}"


def check_window(name: str, value: Any) -> str | None:
    """What is wrong with a ``debounce`` / ``throttle`` value (seconds), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.001 <= value <= WINDOW_MAX or math.isnan(value):
        return f"{name} must be a number of seconds from 0.001 to {WINDOW_MAX:.0f}, got {value!r}"
    return None


def check_task(task: Any) -> str | None:
    """What is wrong with a task's key options taken together, or None."""
    for name in KEY_OPTIONS:
        if problem := check_key(name, getattr(task, name, None)):
            return problem
    for name in WINDOW_OPTIONS:
        if problem := check_window(name, getattr(task, name, None)):
            return problem
    if getattr(task, "debounce", None) and getattr(task, "throttle", None):
        return "debounce and throttle cannot both be set: a burst either runs once at its end or once per window"
    return None


def key_of(name: str, value: str | Callable[..., Any] | None, args: Sequence[Any], kwargs: dict[str, Any]) -> str | None:
    """One call's key of option ``name`` (None: the option is not set); ``ValueError`` if a function returns a bad one."""
    if value is None or isinstance(value, str):
        return value
    key = value(*args, **kwargs)
    if isinstance(key, int) and not isinstance(key, bool):
        key = str(key)  # an account's primary key is the usual answer
    if not isinstance(key, str) or not 0 < len(key) <= KEY_MAX:
        raise ValueError(f"{name}() must return a string of 1-{KEY_MAX} characters (or an int), got {key!r}")
    return key


def own_limits(task: Any, args: Sequence[Any], kwargs: dict[str, Any], *, fair: bool, idem: str) -> str:
    """The task's "limits" argument of enqueue.lua for one call (module docstring); ``fair``: its queue is FAIR.

    ``ValueError`` when debounce or throttle has no idempotency key to count by."""
    maxr, rate = getattr(task, "max_running", None), getattr(task, "rate_limit", None)
    lk = key_of("limit_key", getattr(task, "limit_key", None), args, kwargs)
    fk = key_of("fair_key", getattr(task, "fair_key", None), args, kwargs) if fair else None
    debounce, throttle = getattr(task, "debounce", None), getattr(task, "throttle", None)
    if lk is None and not fair and not debounce and not throttle:
        return f"{maxr or ''}|{rate_spec(rate)}" if maxr or rate else ""
    if (debounce or throttle) and not idem:
        raise ValueError("debounce and throttle count by the call's idempotency key: give one, "
                         "using(idempotency_key=...) or @task(idempotency_key=...)")
    spec: dict[str, Any] = {}
    if maxr:
        spec["m"] = str(maxr)
    if rate:
        spec["r"] = rate_spec(rate)
    if lk is not None:
        spec["lk"] = lk
    if fair:
        spec["fk"] = fk or ""
    if debounce:
        spec["d"] = max(1, round(debounce * 1000))
    if throttle:
        spec["t"] = max(1, round(throttle * 1000))
    return json.dumps(spec, separators=(",", ":"), ensure_ascii=False)
