"""``manage.py redisq task ID``: one task in any state, with its progress as a bar.

    redisq task ID [--queue Q] [--json]

Kept out of redisq.py (a module per subcommand). Exit 0 with the task shown, 1
when there is no such task, 2 when Redis is unreachable; each error is one line.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_redisq.exceptions import RedisError
from django_redisq.management.commands._text import printable
from django_redisq.ops.inspector import Inspector
from django_redisq.ops.operations import TASK_ID_RE
from django_redisq.partitions import logical
from django_redisq.progress import Progress

BAR_WIDTH = 30


def add_parser(sub: Any) -> None:
    p = sub.add_parser("task", help="one task in any state: its state, attempts, progress (as a bar) and result")
    p.add_argument("task_id", metavar="ID", help="the task's id (result.id)")
    p.add_argument("--queue", dest="task_queue", metavar="Q", help="look only in this queue (default: every configured queue)")
    p.add_argument("--json", action="store_true", help="print JSON")


def bar(progress: Progress, width: int = BAR_WIDTH) -> str:
    """``[#########---------------------]  30%  3 of 10: row 3``."""
    filled = round(progress.fraction * width)
    amount = f"{progress.done:g} of {progress.total:g}"
    return f"[{'#' * filled}{'-' * (width - filled)}] {progress.percent:3d}%  {amount}{': ' + progress.message if progress.message else ''}"


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    task_id = opts["task_id"]
    if not TASK_ID_RE.match(task_id):
        raise CommandError(f"not a task id (1-64 letters, digits, '_', '-', '.', ':'): {task_id[:80]!r}", returncode=2)
    queue = opts.get("task_queue")
    if queue:
        ins.keys(queue)  # UnknownQueue -> CommandError
    try:
        where = ins.task_queues([task_id]).get(task_id)  # a partition's name, in a partitioned queue
        if where and queue and logical(where) != queue:
            where = None
        detail = ins.task(where, task_id) if where else None
    except (RedisError, OSError) as exc:
        raise CommandError(f"Redis unreachable at {ins.where}: {type(exc).__name__}: {exc}", returncode=2) from None
    if detail is None:
        raise CommandError(f"no task {task_id!r} in {f'queue {queue!r}' if queue else 'any configured queue'}", returncode=1)
    r = detail.row
    lines = [f"id:        {printable(r.id)}", f"task:      {printable(r.task) or '?'}", f"queue:     {printable(r.queue)}",
             f"state:     {printable(r.state) or '?'}{f' ({printable(r.reason)})' if r.reason else ''}",
             f"attempts:  {r.failures} failed, {r.deliveries} deliveries",
             f"enqueued:  {r.enqueued_at or '-'}", f"started:   {detail.started_at or '-'}", f"finished:  {detail.finished_at or r.died_at or '-'}"]
    if detail.progress is not None:
        lines.append(f"progress:  {printable(bar(detail.progress))}")
    if detail.result is not None:
        lines.append(f"result:    {printable(detail.result[:200])}{'...' if len(detail.result) > 200 else ''}")
    if detail.attempts:
        last = detail.attempts[-1]
        lines.append(f"error:     {printable(last.exc)}: {printable(last.message[:200])}")
    data = asdict(detail)
    data["progress"] = detail.progress.as_dict() if detail.progress is not None else None
    command.stdout.write(json.dumps(data, default=str, indent=2) if opts.get("json") else "\n".join(lines))
