"""``manage.py redisq cancel``: waiting tasks are dead-lettered now, running ones stopped by their worker.

    redisq cancel ID [ID ...] [--queue Q] [--json]

One line per id: cancelled (was waiting, now dead), requested (running),
finished, missing; any missing id makes the exit code 1.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from django_redisq.management.cli.out import FAILED, Reported, emit, queue_of, table, usage
from django_redisq.ops.inspector import Inspector
from django_redisq.ops.operations import TASK_ID_RE, Operations


def add_parser(sub: Any) -> None:
    cancel = sub.add_parser("cancel", help="cancel tasks: waiting ones are dead-lettered now, running ones stopped by their worker")
    cancel.add_argument("ids", nargs="+", metavar="ID", help="task ids (after '--' if one starts with '-')")
    cancel.add_argument("--queue", help="the queue (default: wherever each task is)")


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    bad = [i for i in opts["ids"] if not TASK_ID_RE.match(i)]
    if bad:
        raise usage("not task ids (1-64 letters, digits, '_', '-', '.', ':'): " + ", ".join(repr(i[:80]) for i in bad))
    queue = queue_of(ins, opts) if opts.get("queue") else None
    outcomes = Operations(ins).cancel(opts["ids"], "cli", queue)
    emit(command, opts, outcomes, "\n".join(table(["task id", "outcome"], outcomes.items())))
    missing = [i for i, outcome in outcomes.items() if outcome == "missing"]
    if missing:
        raise Reported(f"no such task in {f'queue {queue}' if queue else 'any configured queue'}: {', '.join(missing)}",
                           returncode=FAILED)
