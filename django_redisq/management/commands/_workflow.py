"""``manage.py redisq workflow ID [--json]``: a workflow's status and each step's state, timing and attempts.

Exit codes (_out.py): 0 when the workflow is found (whatever its status: the
output says it), 1 when there is no such workflow, 3 when Redis is unreachable
(redisq.py says so for every subcommand).
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_redisq.management.commands._out import FAILED, table
from django_redisq.management.commands._text import printable
from django_redisq.ops.inspector import Inspector
from django_redisq.ops.workflows import WorkflowNotFound, describe


def add_parser(sub: Any) -> None:
    p = sub.add_parser("workflow", help="a workflow (chain, group, chord): its status and each step's state")
    p.add_argument("workflow_id", metavar="ID", help="the workflow's id (WorkflowResult.id)")


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    try:
        view = describe(opts["workflow_id"], ins.options.alias)
    except WorkflowNotFound as exc:
        raise CommandError(str(exc), returncode=FAILED) from None
    if opts.get("json"):
        command.stdout.write(json.dumps(view.as_json(), indent=2))
        return
    head = printable(f"workflow {view.id}: {view.status} ({view.stored_status})" + (f": {view.error}" if view.error else ""))
    rows = [(s.index, s.state, s.task, s.queue, s.task_id, ",".join(map(str, s.parents)) or "-", s.attempts,
             f"{(s.finished_at - s.started_at).total_seconds():.3f}s" if s.finished_at and s.started_at else "-", s.error)
            for s in view.steps]
    lines = table(["#", "state", "task", "queue", "task id", "after", "attempts", "took", "error"], rows, right=(0, 6), fill=8)
    command.stdout.write("\n".join([head, *lines]))
