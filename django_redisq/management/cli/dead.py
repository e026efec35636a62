"""``manage.py redisq dead``: list, show, replay and purge dead letters.

    redisq dead list [--queue Q] [--task T] [--exc E] [--search S] [--limit N] [--start POS] [--json]
    redisq dead show ID [--queue Q] [--json]
    redisq dead replay (--all | ID ...) [--queue Q] [--to Q2] [filters] [--json]
    redisq dead purge (--all | ID ...) [--queue Q] [filters] [--noinput] [--json]

A run over many dead letters (``--all``) draws a progress bar on stderr.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_redisq.management.cli.args import non_negative, positive
from django_redisq.management.cli.out import FAILED, emit, queue_of, table, usage, when
from django_redisq.management.cli.text import printable
from django_redisq.ops.inspector import DeadFilter, Inspector
from django_redisq.ops.operations import DELETE, REPLAY, Operations, Progress


def add_parser(sub: Any) -> None:
    dead = sub.add_parser("dead", help="dead letters").add_subparsers(dest="dead_command", required=True,
                                                                       metavar="{list,show,replay,purge}")
    listing = dead.add_parser("list", help="newest first")
    _filters(listing)
    listing.add_argument("--queue", help="the queue (default: the first configured)")
    listing.add_argument("--limit", type=positive, default=20, help="how many (default: %(default)s)")
    listing.add_argument("--start", type=non_negative(int), default=0, help="position to start at (printed as 'next' by a previous list)")
    show = dead.add_parser("show", help="one dead letter in full")
    show.add_argument("id")
    show.add_argument("--queue", help="its queue (default: look in every configured queue)")
    for name, verb in (("replay", "replay into pending"), ("purge", "delete for good")):
        p = dead.add_parser(name, help=verb)
        p.add_argument("ids", nargs="*", metavar="ID")
        p.add_argument("--all", action="store_true", help="every dead letter of --queue matching the filters")
        p.add_argument("--queue", help="the queue (needed with --all; default for ids: wherever each one is)")
        _filters(p)
        if name == "replay":
            p.add_argument("--to", help="replay into this other configured queue instead")
        else:
            p.add_argument("--noinput", "--no-input", action="store_false", dest="interactive",
                           help="do not ask for confirmation before purging with --all")


def _filters(parser: Any) -> None:
    parser.add_argument("--task", default="", help="task path, or its last part ('send_receipt')")
    parser.add_argument("--exc", default="", help="exception class path, or its last part ('ValueError')")
    parser.add_argument("--search", default="", help="text in the last error message (ASCII case-insensitive)")


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    {"list": listing, "show": show, "replay": replay, "purge": purge}[opts["dead_command"]](command, ins, opts)


def _flt(opts: dict[str, Any]) -> DeadFilter:
    return DeadFilter(opts.get("task", ""), opts.get("exc", ""), opts.get("search", ""))


def listing(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    queue = queue_of(ins, opts)
    page = ins.dead_page(queue, _flt(opts), start=max(0, opts["start"]), per_page=opts["limit"])
    lines = table(["id", "died at", "task", "error"],
                  [[r.id, when(r.died_at) if r.died_at else "?", r.task or "?", f"{r.exc_name or '?'}: {r.error}"]
                   for r in page.items], fill=3) if page.items else []
    if not lines:
        lines.append(f"no dead letters in queue {queue}" + (" match" if _flt(opts) else ""))
    if page.total is not None and (page.items or page.total):  # an empty queue is said once, not twice
        lines.append(f"{page.total} dead letter(s) in queue {queue}")
    if page.next_start is not None:
        lines.append(f"more: --start {page.next_start} (with the same options)")
    data = {"queue": queue, "total": page.total, "next_start": page.next_start, "scanned": page.scanned,
            "items": [asdict(r) for r in page.items]}
    emit(command, opts, data, "\n".join(lines))


def show(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    task_id = opts["id"]
    queue = queue_of(ins, opts) if opts.get("queue") else ins.dead_queue_of([task_id]).get(task_id)
    detail = ins.task(queue, task_id) if queue else None
    if detail is None:
        raise CommandError(f"no dead letter {printable(task_id)!r} in " + (f"queue {queue!r}" if opts.get("queue") else "any configured queue"),
                           returncode=FAILED)
    r = detail.row
    lines = [f"id:        {printable(r.id)}", f"task:      {printable(r.task)}", f"queue:     {printable(r.queue)}",
             f"state:     {printable(r.state)} ({printable(r.reason)})",
             f"attempts:  {r.failures} failed, {r.deliveries} deliveries", f"died at:   {r.died_at}",
             f"workers:   {printable(', '.join(detail.workers)) or '-'}", f"idem key:  {printable(detail.idempotency_key) or '-'}"]
    if detail.message_error:
        lines += [f"message:   {printable(detail.message_error)}", printable(detail.raw_message)]
    else:
        lines += [f"args:      {printable(json.dumps(detail.args))}", f"kwargs:    {printable(json.dumps(detail.kwargs))}"]
    for n, a in enumerate(detail.attempts, 1):  # a traceback keeps its lines, nothing else does
        lines += ["", f"attempt {n}: {printable(a.exc)} at {a.at}: {printable(a.message)}", printable(a.traceback.rstrip(), lines=True)]
    emit(command, opts, asdict(detail), "\n".join(lines))


def replay(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    _act(command, ins, REPLAY, opts, opts.get("to"))


def purge(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    _act(command, ins, DELETE, opts, None)


def _check(ops: Operations, action: str, queue: str, to: str | None) -> None:
    try:
        ops.check(action, queue, to)
    except ValueError as exc:
        raise usage(str(exc)) from None


def _act(command: BaseCommand, ins: Inspector, action: str, opts: dict[str, Any], to: str | None) -> None:
    ids, flt, ops = opts["ids"], _flt(opts), Operations(ins)
    past = "replayed" if action == REPLAY else "deleted"
    if ids and opts["all"]:
        raise usage("give dead letter ids or --all, not both")
    if not ids and not opts["all"]:
        raise usage("give dead letter ids, or --all (with --queue and optional filters) for every match")
    if ids and flt:
        raise usage("--task, --exc and --search go with --all")
    if opts["all"]:
        queue = queue_of(ins, opts)
        _check(ops, action, queue, to)
        total = ins.count_dead(queue, flt)
        if action == DELETE and opts.get("interactive"):
            _confirm(command, f"Delete {total} dead letter(s) of queue {queue} for good? Type 'yes' to continue: ")
        progress = Progress(total=total)
        started = time.monotonic()
        ops.act_matching(action, queue, flt, progress, to, on_batch=_progress_bar(command, past))
        command.stderr.write("")
        done, skipped, seconds = progress.done, progress.skipped, time.monotonic() - started
        where = {queue: done}
    else:
        found = ins.dead_queue_of(ids) if not opts.get("queue") else dict.fromkeys(
            ins.present_dead(queue_of(ins, opts), ids), queue_of(ins, opts))
        missing = [i for i in ids if i not in found]
        if missing:
            raise CommandError(f"not dead letters of {'queue ' + opts['queue'] if opts.get('queue') else 'any configured queue'}: "
                               + ", ".join(map(printable, missing)), returncode=FAILED)
        started, done, skipped, where = time.monotonic(), 0, 0, {}
        for queue in dict.fromkeys(found.values()):
            _check(ops, action, queue, to)
            d, s = ops.act(action, queue, [i for i in ids if found[i] == queue], to)
            done, skipped, where[queue] = done + d, skipped + s, d
        seconds = time.monotonic() - started
    data = {"action": action, "done": done, "skipped": skipped, "by_queue": where, "to": to, "seconds": round(seconds, 3)}
    text = f"{past} {done} dead letter(s)" + (f" into queue {to}" if to else "") + f" in {seconds:.2f}s"
    if skipped:
        text += f"; {skipped} could not be moved (their message does not decode)"
    emit(command, opts, data, text)


def _confirm(command: BaseCommand, question: str) -> None:
    """Ask on stderr, read the answer from stdin (a terminal or not, as Django's commands do).

    An empty or closed stdin is a refusal: without --noinput, nothing is deleted unasked.
    """
    command.stderr.write(question, ending="")
    command.stderr.flush()
    try:
        answer = sys.stdin.readline()
    except (OSError, ValueError):  # closed, or not readable at all
        answer = ""
    if not answer:
        raise usage("purge --all needs confirmation and stdin is empty; pass --noinput to purge without asking")
    if answer.strip() != "yes":
        raise CommandError("purge cancelled", returncode=FAILED)


def _progress_bar(command: BaseCommand, past: str) -> Any:
    tty = command.stderr.isatty()
    last = [0.0]

    def show(p: Progress) -> None:
        now = time.monotonic()
        if not p.finished and now - last[0] < (0.1 if tty else 2.0):
            return
        last[0] = now
        total = max(p.total, p.done, 1)
        filled = int(30 * p.done / total)
        line = f"[{'#' * filled}{'.' * (30 - filled)}] {p.done}/{p.total} {past}"
        if tty:
            command.stderr.write("\r" + line, ending="")
            command.stderr.flush()
        else:
            command.stderr.write(line)

    return show
