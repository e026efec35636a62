"""``manage.py redisq workflow ID [--offset N] [--limit N] [--repair] [--json]``: a workflow's status, counts and
one page of its steps (state, timing, attempts).

A bounded read that writes nothing: the counts come from the workflow's record,
the steps ``--limit`` (default 100) at a time from ``--offset``. ``--repair``
is the one write (``ops.workflows.repair``): it records steps settled or
dead-lettered where no workflow hook saw them, then shows the page.

Exit codes (out.py): 0 when the workflow is found (whatever its status: the
output says it), 1 when there is no such workflow, 3 when Redis is unreachable
(redisq.py says so for every subcommand).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_redisq.management.cli.out import FAILED, table
from django_redisq.management.cli.text import printable
from django_redisq.ops.inspector import Inspector
from django_redisq.ops.workflows import MAX_PAGE, PAGE, WorkflowNotFound, describe, repair


def add_parser(sub: Any) -> None:
    p = sub.add_parser("workflow", help="a workflow (chain, group, chord): its status, counts and a page of its steps")
    p.add_argument("workflow_id", metavar="ID", help="the workflow's id (WorkflowResult.id)")
    p.add_argument("--offset", type=int, default=0, help="the first step shown (default 0)")
    p.add_argument("--limit", type=int, default=PAGE, help=f"steps shown (default {PAGE}, at most {MAX_PAGE})")
    p.add_argument("--repair", action="store_true",
                   help="first record steps settled or dead-lettered where no workflow hook saw them (a write)")


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    alias = ins.options.alias
    try:
        if opts.get("repair"):
            fixed = repair(opts["workflow_id"], alias)
            command.stderr.write(f"repaired {fixed} step{'s' if fixed != 1 else ''}")
        view = describe(opts["workflow_id"], alias, offset=opts.get("offset") or 0, limit=opts.get("limit") or PAGE)
    except WorkflowNotFound as exc:
        raise CommandError(str(exc), returncode=FAILED) from None
    if opts.get("json"):
        command.stdout.write(json.dumps(view.as_json(), indent=2))
        return
    head = printable(f"workflow {view.id}: {view.status} ({view.stored_status})" + (f": {view.error}" if view.error else ""))
    counts = f"{view.total} steps: {view.done} done, {view.failed} failed; steps {view.offset}-{view.last_index} shown"
    if view.next_offset is not None:
        counts += f" (next: --offset {view.next_offset})"
    rows = [(s.index, s.state, printable(s.task), s.queue, s.task_id, s.after_text(",") or "-", s.attempts,
             f"{(s.finished_at - s.started_at).total_seconds():.3f}s" if s.finished_at and s.started_at else "-", s.error)
            for s in view.steps]
    lines = table(["#", "state", "task", "queue", "task id", "after", "attempts", "took", "error"], rows, right=(0, 6), fill=8)
    command.stdout.write("\n".join([f"{head} [{counts}]", *lines]))
