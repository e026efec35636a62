"""The benchmark's tasks: a no-op, and one that records when it started."""

from __future__ import annotations

from common import record_start

import django_redisq


@django_redisq.task
def noop(x: int) -> int:
    return x


@django_redisq.task
def stamp(x: int) -> int:
    return record_start(x)
