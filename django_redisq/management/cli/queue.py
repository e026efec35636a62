"""``manage.py redisq queue``: every queue, active or paused; pause or resume one.

    redisq queue [list] [--json]
    redisq queue (pause | resume) NAME [--json]
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand

from django_redisq.management.cli.out import emit, table, when, who
from django_redisq.management.cli.stats import pause_state
from django_redisq.management.cli.text import printable
from django_redisq.ops.inspector import Inspector
from django_redisq.ops.operations import PAUSE, QueueOperations


def add_parser(sub: Any) -> None:
    queue = sub.add_parser("queue", help="the queues and whether each is paused; pause or resume one")
    control = queue.add_subparsers(dest="queue_command", metavar="{list,pause,resume}")
    control.add_parser("list", help="every queue: active or paused (since when, by whom)")
    for name, verb in (("pause", "workers start none of its tasks (within a second) until resumed; enqueues still succeed"),
                       ("resume", "workers serve it again (within a second)")):
        control.add_parser(name, help=verb).add_argument("name", metavar="NAME", help="the queue")


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    action = opts.get("queue_command") or "list"
    if action == "list":
        figures = ins.figures()
        lines = table(["queue", "pending", "running", "held", "state"],
                      [[f.queue, f.pending, f.running, f.held, pause_state(f)] for f in figures], right=(1, 2, 3))
        data = [{"queue": f.queue, "pending": f.pending, "running": f.running, "held": f.held, "paused": f.paused,
                 "paused_at": f.paused_at, "paused_by": f.paused_by} for f in figures]
        return emit(command, opts, data, "\n".join(lines))
    name = opts["name"]
    change = QueueOperations(ins).act(action, name, who())  # UnknownQueue: exit 2
    since = f" (since {when(change.at)}" + (f" by {printable(change.by)})" if change.by else ")") if change.at else ""
    if action == PAUSE:
        text = (f"paused queue {name}: workers start none of its tasks within a second; enqueues still succeed"
                if change.changed else f"queue {name} was paused already{since}")
    else:
        text = f"resumed queue {name}{since}" if change.changed else f"queue {name} was not paused"
    emit(command, opts, asdict(change), text)
