"""The periodic schedules' steps: read their markers, claim due ticks (fire.lua), pause, resume, run now.

A step family the broker holds (``broker.schedules``), built with its ``ScriptRunner``; the
scheduler (worker/scheduler.py) and the operator's schedule commands (ops/operations.py) call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from django_redisq.store.scripts.runner import ScriptRunner


class SchedulePaused(NamedTuple):
    """schedule_pause.lua's answer: whether this call paused the schedule, and since when (Redis ms)."""

    now: bool
    since: int


class ScheduleSteps:
    """The periodic schedules' steps on their markers (``P:sched:<name>``)."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner

    def markers(self, schedules: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
        """The markers of schedules ``(queue, name)``, in one round trip."""
        pipe = self.runner.client.pipeline(transaction=False)
        for queue, name in schedules:
            pipe.hgetall(self.runner.keys(queue).schedule(name))
        return cast("list[dict[str, str]]", pipe.execute())

    def fire(self, queue: str, name: str, claim: Claim) -> Fired:
        """Claim a schedule's due ticks and enqueue their tasks, in one step (store/scripts/fire.lua)."""
        k = self.runner.keys(queue)
        argv: list[Any] = [
            k.prefix, claim.expected, claim.upto, claim.missed, claim.max_late_ms, 1 if claim.allow_overlap else 0,
            claim.ttl_ms, claim.task, claim.id_base, len(claim.ticks),
        ]
        for tick, msg in claim.ticks:
            argv += (tick, msg)
        argv += (claim.priority, claim.limits)
        out = self.runner.run("fire", keys=[k.pending, k.scheduled, k.schedule(name), k.prioritized, k.prioseq], args=argv)
        return Fired(int(out[0]), str(out[1]), int(out[2]), int(out[3]), int(out[4]), int(out[5]), [str(i) for i in out[6:]])

    def pause(self, queue: str, name: str, by: str) -> SchedulePaused:
        """Pause a schedule (store/scripts/schedule_pause.lua): (paused by this call, paused since in Redis ms)."""
        code, since = self.runner.run("schedule_pause", keys=[self.runner.keys(queue).schedule(name)], args=[by])
        return SchedulePaused(int(code) == 1, int(since))

    def resume(self, queue: str, name: str, ttl_ms: int) -> int | None:
        """Resume a paused schedule (store/scripts/schedule_resume.lua): when its pause began (Redis ms), None if it was not paused."""
        code, since = self.runner.run("schedule_resume", keys=[self.runner.keys(queue).schedule(name)], args=[ttl_ms])
        return int(since) if int(code) == 1 else None

    def run_now(self, queue: str, name: str, task_id: str, message: str, task: str, ttl_ms: int, priority: int = 0,
                     limits: str = "") -> int | None:
        """Enqueue a schedule's task once now, outside its ticks (store/scripts/schedule_run.lua).

        Returns the Redis time it was enqueued at, or None if a task with ``task_id`` exists already.
        """
        k = self.runner.keys(queue)
        code, at = self.runner.run("schedule_run", keys=[k.pending, k.scheduled, k.schedule(name), k.prioritized, k.prioseq],
                                                args=[k.prefix, task_id, message, task, ttl_ms, priority, limits])
        return int(at) if int(code) == 1 else None


@dataclass(frozen=True, slots=True)
class Claim:
    """What a scheduler asks fire.lua to claim for one schedule."""

    expected: str  # the marker's last tick as read ('' = no marker)
    upto: int
    missed: int
    max_late_ms: int
    allow_overlap: bool
    ttl_ms: int
    task: str
    id_base: str
    ticks: list[tuple[int, str]]
    priority: int = 0  # the task's (-100..100)
    limits: str = ""  # the task's own fleet-wide limits (limits.task_limits)


@dataclass(frozen=True, slots=True)
class Fired:
    code: int  # 1 claimed, 0 another scheduler won, -1 the marker moved (read again), -2 upto is in the future
    last: str
    fired: int
    missed: int
    skipped: int
    paused: int  # ticks not run because the schedule was paused
    ids: list[str]
