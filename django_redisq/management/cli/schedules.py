"""``manage.py redisq schedules``: periodic schedules (next and last run, missed and skipped ticks); pause, resume, run now.

    redisq schedules [--json]
    redisq schedules (pause | resume | run) NAME [--json]
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand

from django_redisq.exceptions import InvalidArguments
from django_redisq.management.cli.out import emit, table, usage, when, who
from django_redisq.management.cli.text import printable
from django_redisq.ops.inspector import Inspector, UnknownSchedule, schedule_rows
from django_redisq.ops.operations import PAUSE, RUN_NOW, ScheduleOperations


def add_parser(sub: Any) -> None:
    sched = sub.add_parser("schedules", help="periodic schedules: next and last run, missed and skipped ticks; pause, resume, run now")
    control = sched.add_subparsers(dest="schedule_command", metavar="{pause,resume,run}")
    for name, verb in (("pause", "stop running its ticks, on every worker, until resumed"),
                       ("resume", "run its ticks again from the next one (ticks that passed while paused are not run)"),
                       ("run", "enqueue its task once now, outside its ticks")):
        control.add_parser(name, help=verb).add_argument("name", metavar="NAME", help="the schedule's name")


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    if opts.get("schedule_command"):
        return control(command, ins, opts["schedule_command"], opts)
    rows = schedule_rows(ins)

    def state(r: Any) -> str:
        if r.problems:
            return f"NOT RUN: {' '.join(r.problems)}"
        if r.paused:
            return f"PAUSED since {when(r.paused_at)}" + (f" by {printable(r.paused_by)}" if r.paused_by else "")
        return "active"

    lines = table(["schedule", "expression", "timezone", "next run", "last run", "fired", "missed", "skipped", "paused", "state"],
                  [[r.name, r.expression, r.timezone, when(r.next_run), when(r.last_run), r.fired, r.missed, r.skipped,
                    r.paused_ticks, state(r)] if not r.problems else [r.name, "-", "-", "-", "-", "", "", "", "", state(r)]
                   for r in rows], right=(5, 6, 7, 8))  # a problem is printed whole: it says what to fix
    if not rows:
        lines = ["no schedules (TASKS[alias]['OPTIONS']['SCHEDULES'] or @periodic)"]
    emit(command, opts, [asdict(r) for r in rows], "\n".join(lines))


def control(command: BaseCommand, ins: Inspector, action: str, opts: dict[str, Any]) -> None:
    name = opts["name"]
    try:
        change = ScheduleOperations(ins).act(action, name, who())
    except (UnknownSchedule, InvalidArguments) as exc:
        raise usage(str(exc)) from None
    if action == RUN_NOW:
        text = f"enqueued schedule {name}'s task now as {change.task_id} on queue {change.queue}"
    elif action == PAUSE:
        text = f"paused schedule {name}" if change.changed else f"schedule {name} was paused already (since {when(change.at)})"
    else:
        text = f"resumed schedule {name}" if change.changed else f"schedule {name} was not paused"
    emit(command, opts, asdict(change), text)
