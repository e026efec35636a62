"""``manage.py redisq workflow ID [--json]``: a workflow's status and each step's state, timing and attempts.

Exit 0 when the workflow is found (whatever its status: the output says it),
1 when there is no such workflow, 2 when Redis is unreachable.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_redisq.exceptions import RedisError
from django_redisq.management.commands._text import printable
from django_redisq.ops.inspector import Inspector
from django_redisq.ops.workflows import WorkflowNotFound, describe


def add_parser(sub: Any) -> None:
    p = sub.add_parser("workflow", help="a workflow (chain, group, chord): its status and each step's state")
    p.add_argument("workflow_id", metavar="ID", help="the workflow's id (WorkflowResult.id)")
    p.add_argument("--json", action="store_true", help="print JSON")


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    try:
        view = describe(opts["workflow_id"], ins.options.alias)
    except WorkflowNotFound as exc:
        raise CommandError(str(exc)) from None
    except (RedisError, OSError) as exc:
        raise CommandError(f"Redis unreachable at {ins.where}: {type(exc).__name__}", returncode=2) from None
    if opts.get("json"):
        command.stdout.write(json.dumps(view.as_json(), indent=2))
        return
    lines = [f"workflow {view.id}: {view.status} ({view.stored_status})" + (f": {view.error}" if view.error else "")]
    for s in view.steps:
        after = f" after {','.join(map(str, s.parents))}" if s.parents else ""
        took = f" {(s.finished_at - s.started_at).total_seconds():.3f}s" if s.finished_at and s.started_at else ""
        lines.append(f"  {s.index:>3} {s.state:<9} {s.task} [{s.queue}] {s.task_id}{after} attempts={s.attempts}{took}"
                     + (f"  {s.error}" if s.error else ""))
    command.stdout.write(printable("\n".join(lines), lines=True))
