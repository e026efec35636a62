"""``manage.py redisq``: queue figures and dead letters from a shell.

    redisq stats [--json]
    redisq queue [list] [--json]
    redisq queue (pause | resume) NAME [--json]
    redisq schedules [--json]
    redisq schedules (pause | resume | run) NAME [--json]
    redisq dead list [--queue Q] [--task T] [--exc E] [--search S] [--limit N] [--start POS] [--json]
    redisq dead show ID [--queue Q] [--json]
    redisq dead replay (--all | ID ...) [--queue Q] [--to Q2] [filters] [--json]
    redisq dead purge (--all | ID ...) [--queue Q] [filters] [--noinput] [--json]
    redisq cancel ID [ID ...] [--queue Q] [--json]
    redisq health [--max-pending N] [--max-age SECONDS] [--max-dead N] [--min-workers N] [--queue Q ...] [--json]

It reads through ``ops/inspector.py`` and changes through ``ops/operations.py``, as
the admin does. Long runs draw a progress bar on stderr. What it prints of Redis's
strings (ids, task names, errors, tracebacks, workers, who paused) is escaped
(``_text.printable``): a stored ESC or BEL never reaches the terminal.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
import time
from dataclasses import asdict, replace
from datetime import datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_redisq.exceptions import InvalidArguments
from django_redisq.management.commands import _health, _topics, _workflow
from django_redisq.management.commands._args import non_negative, positive
from django_redisq.management.commands._text import printable
from django_redisq.ops.inspector import DeadFilter, Inspector, UnknownQueue, UnknownSchedule, schedule_rows
from django_redisq.ops.operations import DELETE, PAUSE, REPLAY, RUN_NOW, TASK_ID_RE, Operations, Progress, QueueOperations, ScheduleOperations


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (OSError, KeyError): say so, still act
        return "unknown user"


class Command(BaseCommand):
    help = ("Queue figures and health; pause or resume a queue; list, show, replay or purge dead letters; cancel tasks; "
            "control schedules.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", help="the TASKS alias (default: %(default)s)")
        sub = parser.add_subparsers(dest="command", required=True, metavar="{stats,queue,health,schedules,dead,cancel}")
        queue = sub.add_parser("queue", help="the queues and whether each is paused; pause or resume one")
        queue.add_argument("--json", action="store_true", help="print JSON")
        qcontrol = queue.add_subparsers(dest="queue_command", metavar="{list,pause,resume}")
        qcontrol.add_parser("list", help="every queue: active or paused (since when, by whom)").add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
        for name, verb in (("pause", "workers start none of its tasks (within a second) until resumed; enqueues still succeed"),
                           ("resume", "workers serve it again (within a second)")):
            p = qcontrol.add_parser(name, help=verb)
            p.add_argument("name", metavar="NAME", help="the queue")
            p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the outcome as JSON")
        sched = sub.add_parser("schedules", help="periodic schedules: next and last run, missed and skipped ticks; pause, resume, run now")
        sched.add_argument("--json", action="store_true", help="print JSON")
        control = sched.add_subparsers(dest="schedule_command", metavar="{pause,resume,run}")
        for name, verb in (("pause", "stop running its ticks, on every worker, until resumed"),
                           ("resume", "run its ticks again from the next one (ticks that passed while paused are not run)"),
                           ("run", "enqueue its task once now, outside its ticks")):
            p = control.add_parser(name, help=verb)
            p.add_argument("name", metavar="NAME", help="the schedule's name")
            p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the outcome as JSON")
        stats = sub.add_parser("stats", help="sizes, throughput and workers of every queue")
        stats.add_argument("--json", action="store_true", help="print JSON")
        _health.add_parser(sub)
        _workflow.add_parser(sub)
        _topics.add_parser(sub)  # events (ops/topics.py)
        dead = sub.add_parser("dead", help="dead letters").add_subparsers(dest="dead_command", required=True,
                                                                           metavar="{list,show,replay,purge}")
        listing = dead.add_parser("list", help="newest first")
        self._filters(listing)
        listing.add_argument("--queue", help="the queue (default: the first configured)")
        listing.add_argument("--limit", type=positive, default=20, help="how many (default: %(default)s)")
        listing.add_argument("--start", type=non_negative(int), default=0, help="position to start at (printed as 'next' by a previous list)")
        listing.add_argument("--json", action="store_true", help="print JSON")
        show = dead.add_parser("show", help="one dead letter in full")
        show.add_argument("id")
        show.add_argument("--queue", help="its queue (default: look in every configured queue)")
        show.add_argument("--json", action="store_true", help="print JSON")
        for name, verb in (("replay", "replay into pending"), ("purge", "delete for good")):
            p = dead.add_parser(name, help=verb)
            p.add_argument("ids", nargs="*", metavar="ID")
            p.add_argument("--all", action="store_true", help="every dead letter of --queue matching the filters")
            p.add_argument("--queue", help="the queue (needed with --all; default for ids: wherever each one is)")
            self._filters(p)
            p.add_argument("--json", action="store_true", help="print the outcome as JSON")
            if name == "replay":
                p.add_argument("--to", help="replay into this other configured queue instead")
            else:
                p.add_argument("--noinput", "--no-input", action="store_false", dest="interactive",
                               help="do not ask for confirmation before purging with --all")

        cancel = sub.add_parser("cancel", help="cancel tasks: waiting ones are dead-lettered now, running ones stopped by their worker")
        cancel.add_argument("ids", nargs="+", metavar="ID", help="task ids (after '--' if one starts with '-')")
        cancel.add_argument("--queue", help="the queue (default: wherever each task is)")
        cancel.add_argument("--json", action="store_true", help="print the outcome as JSON")

    def _filters(self, parser: CommandParser) -> None:
        parser.add_argument("--task", default="", help="task path, or its last part ('send_receipt')")
        parser.add_argument("--exc", default="", help="exception class path, or its last part ('ValueError')")
        parser.add_argument("--search", default="", help="text in the last error message (ASCII case-insensitive)")

    # -- dispatch --------------------------------------------------------

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            ins = Inspector.for_alias(opts["backend"])
        except UnknownQueue as exc:
            raise CommandError(str(exc)) from None
        self.ins = ins
        try:
            if opts["command"] == "stats":
                self.stats(opts)
            elif opts["command"] == "health":
                _health.run(self, ins, opts)
            elif opts["command"] == "workflow":
                _workflow.run(self, ins, opts)
            elif opts["command"] == "topics":
                _topics.run(self, ins, opts)
            elif opts["command"] == "schedules":
                self.schedules(opts)
            elif opts["command"] == "queue":
                self.queue(opts)
            elif opts["command"] == "cancel":
                self.cancel(opts)
            else:
                getattr(self, f"dead_{opts['dead_command']}")(opts)
        except UnknownQueue as exc:
            raise CommandError(str(exc)) from None

    def emit(self, opts: dict[str, Any], data: Any, text: str) -> None:
        """JSON (which escapes by itself), or the text with anything non-printable escaped, its lines kept.

        Each field from Redis is escaped where the text is built, newlines included
        (``printable``), so only the lines the text is made of remain lines here.
        """
        self.stdout.write(json.dumps(data, default=_json_default, indent=2) if opts.get("json") else printable(text, lines=True))

    def _queue(self, opts: dict[str, Any]) -> str:
        queue = opts.get("queue") or self.ins.queues[0]
        self.ins.keys(queue)  # UnknownQueue -> CommandError
        return queue

    # -- subcommands -----------------------------------------------------

    def stats(self, opts: dict[str, Any]) -> None:
        stats = self.ins.stats()
        lines = [f"{'queue':<16}{'pending':>9}{'sched':>8}{'running':>9}{'held':>7}{'dead':>9}{'oldest':>9}"
                 f"{'ok/min':>8}{'fail/min':>9}{'ok/h':>8}{'fail/h':>8}"]
        workers: dict[str, Any] = {}
        for s in stats:
            age = "-" if s.oldest_pending_age is None else f"{s.oldest_pending_age:.0f}s"
            lines.append(f"{s.queue:<16}{s.pending:>9}{s.scheduled:>8}{s.running:>9}{s.held:>7}{s.dead:>9}{age:>9}"
                         f"{s.processed_minute:>8}{s.failed_minute:>9}{s.processed_hour:>8}{s.failed_hour:>8}")
            for w in s.workers:
                seen = workers.get(w.name)
                if seen is None:
                    workers[w.name] = replace(w)
                else:  # one worker on several queues: its running and held tasks of each
                    seen.holding += w.holding
                    seen.running += w.running
        lines.append("")
        lines += [f"worker {printable(w.name)} host={printable(w.host)} pid={printable(w.pid)} queues={printable(','.join(w.queues))} "
                  f"pool={printable(w.pool)} concurrency={printable(w.concurrency)} running={w.running} held={w.held} "
                  f"heartbeat={w.seen_ago:.1f}s ago{'' if w.alive else ' (silent)'}" for w in workers.values()]
        if not workers:
            lines.append("no workers")
        lines += [self._paused_line(s) for s in stats if s.paused]
        for s in stats:
            lines += [f"limit {s.queue}: {printable(limit.name) or 'the queue (MAX_RUNNING)'} running {limit.running}/{limit.limit}, "
                      f"waiting {limit.waiting}" for limit in s.limits]
            if s.rate_limit:
                lines.append(f"limit {s.queue}: the queue (RATE_LIMIT) {s.rate_limit}")
        data = [{k: v for k, v in asdict(s).items() if k not in ("series", "workers")} | {"series": [
            {"minute": m, "processed": p, "failed": f, "dead": d} for m, p, f, d in s.series],
            "workers": [asdict(w) | {"held": w.held} for w in s.workers]} for s in stats]
        self.emit(opts, data, "\n".join(lines))

    @staticmethod
    def _pause_state(s: Any) -> str:
        """``paused since <time> by <who>``, or ``active``, for a QueueStats or QueueFigures."""
        if not s.paused:
            return "active"
        return "paused" + (f" since {s.paused_at:%Y-%m-%dT%H:%M:%SZ}" if s.paused_at else "") + (f" by {printable(s.paused_by)}" if s.paused_by else "")

    def _paused_line(self, s: Any) -> str:
        return f"queue {s.queue} is {self._pause_state(s).upper()[:6]}{self._pause_state(s)[6:]}: workers start none of its tasks"

    def queue(self, opts: dict[str, Any]) -> None:
        action = opts.get("queue_command") or "list"
        if action == "list":
            figures = self.ins.figures()
            lines = [f"{'queue':<20}{'pending':>9}{'running':>9}{'held':>7}  state"]
            for f in figures:
                lines.append(f"{f.queue:<20}{f.pending:>9}{f.running:>9}{f.held:>7}  {self._pause_state(f)}")
            data = [{"queue": f.queue, "pending": f.pending, "running": f.running, "held": f.held, "paused": f.paused,
                     "paused_at": f.paused_at, "paused_by": f.paused_by} for f in figures]
            return self.emit(opts, data, "\n".join(lines))
        name = opts["name"]
        change = QueueOperations(self.ins).act(action, name, f"manage.py redisq ({_user()})")  # UnknownQueue -> CommandError
        since = f" (since {change.at:%Y-%m-%dT%H:%M:%SZ}" + (f" by {printable(change.by)})" if change.by else ")") if change.at else ""
        if action == PAUSE:
            text = (f"paused queue {name}: workers start none of its tasks within a second; enqueues still succeed"
                    if change.changed else f"queue {name} was paused already{since}")
        else:
            text = f"resumed queue {name}{since}" if change.changed else f"queue {name} was not paused"
        self.emit(opts, asdict(change), text)

    def schedules(self, opts: dict[str, Any]) -> None:
        if opts.get("schedule_command"):
            return self.schedule_control(opts["schedule_command"], opts)
        rows = schedule_rows(self.ins)

        def when(d: datetime | None) -> str:
            return f"{d:%Y-%m-%dT%H:%M:%SZ}" if d else "-"

        lines = [f"{'schedule':<20} {'expression':<16} {'timezone':<16} {'next run':<21}{'last run':<21}{'fired':>6}{'missed':>7}{'skipped':>8}"
                 f"{'paused':>7}  state"]
        for r in rows:
            if r.problems:
                lines.append(f"{r.name:<20} NOT RUN: {' '.join(r.problems)}")
            else:
                state = f"PAUSED since {when(r.paused_at)}" + (f" by {printable(r.paused_by)}" if r.paused_by else "") if r.paused else "active"
                lines.append(f"{r.name:<20} {r.expression:<16} {r.timezone:<16} {when(r.next_run):<21}{when(r.last_run):<21}"
                             f"{r.fired:>6}{r.missed:>7}{r.skipped:>8}{r.paused_ticks:>7}  {state}")
        if not rows:
            lines = ["no schedules (TASKS[alias]['OPTIONS']['SCHEDULES'] or @periodic)"]
        self.emit(opts, [asdict(r) for r in rows], "\n".join(lines))

    def schedule_control(self, action: str, opts: dict[str, Any]) -> None:
        name = opts["name"]
        try:
            change = ScheduleOperations(self.ins).act(action, name, f"manage.py redisq ({_user()})")
        except (UnknownSchedule, InvalidArguments) as exc:
            raise CommandError(str(exc)) from None
        if action == RUN_NOW:
            text = f"enqueued schedule {name}'s task now as {change.task_id} on queue {change.queue}"
        elif action == PAUSE:
            text = f"paused schedule {name}" if change.changed else f"schedule {name} was paused already (since {change.at:%Y-%m-%dT%H:%M:%SZ})"
        else:
            text = f"resumed schedule {name}" if change.changed else f"schedule {name} was not paused"
        self.emit(opts, asdict(change), text)

    def cancel(self, opts: dict[str, Any]) -> None:
        """One line per id: cancelled (was waiting, now dead), requested (running), finished, missing (an error)."""
        bad = [i for i in opts["ids"] if not TASK_ID_RE.match(i)]
        if bad:
            raise CommandError("not task ids (1-64 letters, digits, '_', '-', '.', ':'): " + ", ".join(repr(i[:80]) for i in bad))
        queue = self._queue(opts) if opts.get("queue") else None
        outcomes = Operations(self.ins).cancel(opts["ids"], "cli", queue)
        self.emit(opts, outcomes, "\n".join(f"{i}  {outcome}" for i, outcome in outcomes.items()))
        missing = [i for i, outcome in outcomes.items() if outcome == "missing"]
        if missing:
            raise CommandError(f"no such task in {f'queue {queue}' if queue else 'any configured queue'}: {', '.join(missing)}")

    def dead_list(self, opts: dict[str, Any]) -> None:
        queue = self._queue(opts)
        page = self.ins.dead_page(queue, self._flt(opts), start=max(0, opts["start"]), per_page=opts["limit"])
        lines = [f"{printable(r.id)}  {f'{r.died_at:%Y-%m-%dT%H:%M:%SZ}' if r.died_at else '?':<20}  {printable(r.task) or '?'}  "
                 f"{printable(r.exc_name) or '?'}: {printable(r.error[:80])}" for r in page.items]
        if not lines:
            lines.append(f"no dead letters in queue {queue}" + (" match" if self._flt(opts) else ""))
        if page.total is not None:
            lines.append(f"{page.total} dead letter(s) in queue {queue}")
        if page.next_start is not None:
            lines.append(f"more: --start {page.next_start} (with the same options)")
        data = {"queue": queue, "total": page.total, "next_start": page.next_start, "scanned": page.scanned,
                "items": [asdict(r) for r in page.items]}
        self.emit(opts, data, "\n".join(lines))

    def dead_show(self, opts: dict[str, Any]) -> None:
        task_id = opts["id"]
        queue = opts.get("queue") or self.ins.dead_queue_of([task_id]).get(task_id)
        detail = self.ins.task(queue, task_id) if queue else None
        if detail is None:
            raise CommandError(f"no dead letter {task_id!r} in " + (f"queue {queue!r}" if opts.get("queue") else "any configured queue"))
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
        self.emit(opts, asdict(detail), "\n".join(lines))

    def dead_replay(self, opts: dict[str, Any]) -> None:
        self._act(REPLAY, opts, opts.get("to"))

    def dead_purge(self, opts: dict[str, Any]) -> None:
        self._act(DELETE, opts, None)

    # -- replay / purge --------------------------------------------------

    def _flt(self, opts: dict[str, Any]) -> DeadFilter:
        return DeadFilter(opts.get("task", ""), opts.get("exc", ""), opts.get("search", ""))

    def _act(self, action: str, opts: dict[str, Any], to: str | None) -> None:
        ids, flt, ops = opts["ids"], self._flt(opts), Operations(self.ins)
        past = "replayed" if action == REPLAY else "deleted"
        if ids and opts["all"]:
            raise CommandError("give dead letter ids or --all, not both")
        if not ids and not opts["all"]:
            raise CommandError("give dead letter ids, or --all (with --queue and optional filters) for every match")
        if ids and flt:
            raise CommandError("--task, --exc and --search go with --all")
        if opts["all"]:
            queue = self._queue(opts)
            try:
                ops.check(action, queue, to)
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            total = self.ins.count_dead(queue, flt)
            if action == DELETE and opts.get("interactive"):
                self._confirm(f"Delete {total} dead letter(s) of queue {queue} for good? Type 'yes' to continue: ")
            progress = Progress(total=total)
            started = time.monotonic()
            ops.act_matching(action, queue, flt, progress, to, on_batch=self._progress_bar(past))
            self.stderr.write("")
            done, skipped, seconds = progress.done, progress.skipped, time.monotonic() - started
            where = {queue: done}
        else:
            found = self.ins.dead_queue_of(ids) if not opts.get("queue") else dict.fromkeys(
                self.ins.present_dead(self._queue(opts), ids), self._queue(opts))
            missing = [i for i in ids if i not in found]
            if missing:
                raise CommandError(f"not dead letters of {'queue ' + opts['queue'] if opts.get('queue') else 'any configured queue'}: "
                                   + ", ".join(map(printable, missing)))
            started, done, skipped, where = time.monotonic(), 0, 0, {}
            for queue in dict.fromkeys(found.values()):
                try:
                    ops.check(action, queue, to)
                except ValueError as exc:
                    raise CommandError(str(exc)) from None
                d, s = ops.act(action, queue, [i for i in ids if found[i] == queue], to)
                done, skipped, where[queue] = done + d, skipped + s, d
            seconds = time.monotonic() - started
        data = {"action": action, "done": done, "skipped": skipped, "by_queue": where, "to": to, "seconds": round(seconds, 3)}
        text = f"{past} {done} dead letter(s)" + (f" into queue {to}" if to else "") + f" in {seconds:.2f}s"
        if skipped:
            text += f"; {skipped} could not be moved (their message does not decode)"
        self.emit(opts, data, text)

    def _confirm(self, question: str) -> None:
        """Ask on stderr, read the answer from stdin (a terminal or not, as Django's commands do).

        An empty or closed stdin is a refusal: without --noinput, nothing is deleted unasked.
        """
        self.stderr.write(question, ending="")
        self.stderr.flush()
        try:
            answer = sys.stdin.readline()
        except (OSError, ValueError):  # closed, or not readable at all
            answer = ""
        if not answer:
            raise CommandError("purge --all needs confirmation and stdin is empty; pass --noinput to purge without asking")
        if answer.strip() != "yes":
            raise CommandError("purge cancelled")

    def _progress_bar(self, past: str) -> Any:
        tty = self.stderr.isatty()
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
                self.stderr.write("\r" + line, ending="")
                self.stderr.flush()
            else:
                self.stderr.write(line)

        return show
