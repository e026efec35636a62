"""``manage.py redisq``: queue figures, health, schedules and dead letters from a shell.

    redisq stats                                       stats.py
    redisq queue [list | pause NAME | resume NAME]     queue.py
    redisq health [--max-pending N] [...]              health.py
    redisq topics [rewind SUBSCRIPTION --to ...]       topics.py (events)
    redisq workflow ID                                 workflow.py (workflows)
    redisq schedules [pause | resume | run NAME]       schedules.py
    redisq dead (list | show | replay | purge) ...     dead.py
    redisq cancel ID [ID ...]                          cancel.py
    redisq task ID [--queue Q]                         task.py (one task, its progress as a bar)

Every subcommand takes the global options before or after its name
(``--backend``, ``--json``, ``-v``, ``--settings``, ...), prints tables with a
header row, answers ``--json``, and reports an error as one line with the exit
codes of ``out.py``: 0 ok, 1 a failure the command reports, 2 a wrong command
line (or a backend, queue or schedule the settings do not name), 3 Redis unreachable.

The families live in ``django_redisq/management/cli/`` (Django would take any
module of ``commands/`` whose name does not start with ``_`` for a command).
Adding a subcommand family: a module ``cli/NAME.py`` with

    def add_parser(sub) -> None:                   # sub: the subparsers; add yours to it
        p = sub.add_parser("NAME", help="...")     # gets the global options (--json...) by itself
        p.add_argument(...)

    def run(command, ins, opts) -> None:           # command: this Command; ins: the alias's Inspector
        out.emit(command, opts, data, text)       # --json or the text; out.table for tables

and two lines here: ``from django_redisq.management.cli import NAME`` and ``NAME`` in
``FAMILIES``. A module may add its own ``--json`` (it replaces the global one on
its subcommand, and ``redisq --json NAME`` still means JSON). Raise ``out.usage(...)`` for a wrong command line and
``CommandError(..., returncode=out.FAILED)`` for a failure; Redis being
unreachable, an ``UnknownQueue`` and other ``CommandError``\\ s are turned into
one line (and JSON with ``--json``) here, for every family alike.

It reads through ``ops/inspector.py`` and changes through ``ops/operations.py``, as
the admin does. What it prints of Redis's strings (ids, task names, errors,
tracebacks, workers, who paused) is escaped (``text.printable``): a stored ESC
or BEL never reaches the terminal.
"""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_redisq.exceptions import RedisError, RedisUnavailable
from django_redisq.management.cli import cancel, dead, embedded, health, out, queue, schedules, stats, task, topics, workflow
from django_redisq.management.cli.args import one_voice
from django_redisq.ops.inspector import Inspector, UnknownQueue

FAMILIES: tuple[ModuleType, ...] = (stats, queue, health, topics, workflow, schedules, dead, cancel, task, embedded)


class Command(BaseCommand):
    ins: Inspector  # the backend's, once handle has found it (a family module may read it as command.ins)
    help = ("Queue figures and health; pause or resume a queue; list, show, replay or purge dead letters; cancel tasks; "
            "control schedules; the embedded Redis. Exit codes: 0 ok, 1 a failure reported, 2 a wrong command line, 3 Redis unreachable.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser = one_voice(parser)  # one-line usage errors; its subcommands take the global options too
        parser.add_argument("--backend", default="default", help="the TASKS alias (default: %(default)s)")
        parser.add_argument("--json", action="store_true", help="print JSON (every subcommand; errors too)")
        sub = parser.add_subparsers(dest="command", required=True,
                                    metavar="{stats,queue,health,topics,workflow,schedules,dead,cancel,task,embedded}")
        self.families: dict[str, ModuleType] = {}
        for family in FAMILIES:
            before = set(sub.choices)
            family.add_parser(sub)
            self.families.update(dict.fromkeys(set(sub.choices) - before, family))
        for name in self.families:
            _leave_globals_alone(sub.choices[name])

    def handle(self, *args: Any, **opts: Any) -> None:
        alias = opts["backend"]
        if hasattr(self, "ins"):
            del self.ins  # a Command object run twice (call_command in tests) starts afresh
        try:
            try:
                self.ins = Inspector.for_alias(alias)
                self.families[opts["command"]].run(self, self.ins, opts)
            except UnknownQueue as exc:
                raise out.usage(str(exc)) from None
            except ImproperlyConfigured as exc:
                raise CommandError(" ".join(str(exc).split()), returncode=out.FAILED) from None
            except (RedisError, RedisUnavailable, OSError) as exc:
                if out.is_unreachable(exc):
                    where = self.ins.where if hasattr(self, "ins") else "Redis"
                    raise out.unreachable(alias, where, exc) from None
                raise out.redis_failed(exc) from None
        except CommandError as error:
            out.json_error(self, opts, error)
            raise

    def emit(self, opts: dict[str, Any], data: Any, text: str) -> None:
        """``out.emit`` for this command (what a family module may call as ``command.emit``)."""
        out.emit(self, opts, data, text)


def _leave_globals_alone(parser: argparse.ArgumentParser) -> None:
    """A family's own ``--json`` (or ``--backend``) must not reset the one given before the subcommand.

    argparse copies every value of a subcommand's namespace over the command's,
    defaults included: ``redisq --json NAME`` would lose ``--json`` to the
    subcommand's default ``False``. Unset, the global option keeps its value.
    """
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                _leave_globals_alone(child)
        elif action.dest in ("json", "backend", "verbosity"):
            action.default = argparse.SUPPRESS
