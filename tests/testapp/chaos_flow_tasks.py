"""Workflow steps and an event handler for the chaos run's flows (bench/chaos_flows.py).

Each run is recorded in the effects store (tests/testapp/chaos_tasks.py ``effects_store``), apart from the
queue's Redis: ``chaos:fstarts`` / ``chaos:fends`` (LIST) ``<task id>|<ms>|<pid>`` as a run begins and as it
returns, so the accounting sees a step that began before a parent ended, a step never run, or one run twice.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django_redisq import task
from tests.testapp.chaos_tasks import effects_store

RETRIES = 2


def _mark(what: str, tid: str) -> None:
    effects_store().rpush(f"chaos:f{what}", f"{tid}|{int(time.time() * 1000)}|{os.getpid()}")


@task(takes_context=True, max_retries=RETRIES)
def flow_step(context: Any, *values: Any) -> int:
    """A chain's or a chord's step: the sum of the numbers it is given, plus one."""
    tid = context.task_result.id
    _mark("starts", tid)
    time.sleep(0.02)
    out = 1 + sum(v if isinstance(v, int) else sum(v) for v in values)
    _mark("ends", tid)
    return out


@task(takes_context=True, max_retries=RETRIES)
def chaos_event(context: Any, payload: dict[str, Any], event_id: str) -> None:
    """A subscription's handler: its run recorded by its task id (one task per event and subscription)."""
    tid = context.task_result.id
    _mark("starts", tid)
    effects_store().hincrby("chaos:eruns", event_id, 1)
    _mark("ends", tid)


@task(takes_context=True, max_retries=RETRIES)
def chaos_poison(context: Any, n: int) -> str:
    """Returns a lone surrogate (what ``json.loads('"a\\\\ud800b"')`` gives): a result that cannot be stored as UTF-8.
    It must fail its attempt and end within its retries, never run again and again (issue 36)."""
    tid = context.task_result.id
    _mark("starts", tid)
    _mark("ends", tid)
    return "a\ud800b"
