"""``manage.py redisq task ID``: one task in any state, with its progress as a bar.

    redisq task ID [--queue Q] [--clear-step NAME] [--json]

A durable task's recorded steps, sleeps and waits are listed (name, when, how long, result
size); ``--clear-step`` forgets one (not while the task runs) so its next run calls it again.

A subcommand family of redisq.py (its ``FAMILIES``). Exit 0 with the task shown,
1 when there is no such task, 2 for an id that cannot be one, 3 when Redis is
unreachable (redisq.py turns Redis's errors into that line); each error is one line.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_redisq.core.clock import ms_to_datetime
from django_redisq.core.partitions import logical
from django_redisq.management.cli import out
from django_redisq.management.cli.text import printable
from django_redisq.ops.inspector import Inspector, StepRecord
from django_redisq.ops.operations import TASK_ID_RE, Operations
from django_redisq.progress import Progress

BAR_WIDTH = 30


def add_parser(sub: Any) -> None:
    p = sub.add_parser("task", help="one task in any state: its state, attempts, progress (as a bar) and result")
    p.add_argument("task_id", metavar="ID", help="the task's id (result.id)")
    p.add_argument("--queue", dest="task_queue", metavar="Q", help="look only in this queue (default: every configured queue)")
    p.add_argument("--clear-step", dest="clear_step", metavar="NAME",
                   help="forget this recorded step of a durable task, so its next run calls it again")


def bar(progress: Progress, width: int = BAR_WIDTH) -> str:
    """``[#########---------------------]  30%  3 of 10: row 3``."""
    filled = round(progress.fraction * width)
    amount = f"{progress.done:g} of {progress.total:g}"
    return f"[{'#' * filled}{'-' * (width - filled)}] {progress.percent:3d}%  {amount}{': ' + progress.message if progress.message else ''}"


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    task_id = opts["task_id"]
    if not TASK_ID_RE.match(task_id):
        raise out.usage(f"not a task id (1-64 letters, digits, '_', '-', '.', ':'): {task_id[:80]!r}")
    queue = opts.get("task_queue")
    if queue:
        ins.keys(queue)  # UnknownQueue -> CommandError
    where = ins.task_queues([task_id]).get(task_id)  # a partition's name, in a partitioned queue
    if where and queue and logical(where) != queue:
        where = None
    detail = ins.task(where, task_id) if where else None
    if detail is None:
        raise CommandError(f"no task {task_id!r} in {f'queue {queue!r}' if queue else 'any configured queue'}", returncode=out.FAILED)
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
    held_in = where or ""  # found: the queue (a partition's name) that holds it
    steps = ins.steps(held_in, task_id)
    if opts.get("clear_step"):
        _clear(ins, held_in, task_id, opts["clear_step"], steps)
        steps = ins.steps(held_in, task_id)
    lines += [step_line(x) for x in steps]
    data = asdict(detail)
    data["steps"] = [asdict(x) for x in steps]
    data["progress"] = detail.progress.as_dict() if detail.progress is not None else None
    out.emit(command, opts, data, "\n".join(lines))


def step_line(x: StepRecord) -> str:
    """``step:     #0 charge  2026-01-01 10:00:00+00:00  took 12 ms  34 bytes`` (a sleep or wait: its due time)."""
    what = {"step": f"took {x.took} ms  {x.size} bytes", "sleep": f"until {ms_to_datetime(x.due)}",
            "wait": f"{x.state}{f' (event {x.event}, {x.took} ms)' if x.event else ''} until {ms_to_datetime(x.due)}"}
    return f"{x.kind + ':':<10} #{x.index} {printable(x.name)}  {ms_to_datetime(x.at)}  {what.get(x.kind, '')}"


def _clear(ins: Inspector, queue: str, task_id: str, name: str, steps: list[StepRecord]) -> None:
    if name not in {x.name for x in steps}:
        raise CommandError(f"task {task_id!r} has no recorded step {name!r}", returncode=out.FAILED)
    try:
        Operations(ins).clear_step(queue, task_id, name)
    except ValueError as exc:
        raise CommandError(str(exc), returncode=out.FAILED) from None
