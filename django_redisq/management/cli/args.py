"""What the two commands' parsers share (``runworker``, ``redisq``): option types and one-line usage errors.

Each option type refuses a bad value with one line: argparse turns an
``ArgumentTypeError`` into ``error: argument --x: <the message>`` and, through
``CliParser``, exit status 2 with that line alone, before anything touches Redis.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from django.core.management.base import CommandError, CommandParser

from django_redisq.management.cli.out import USAGE


def positive(value: str) -> int:
    """A whole number, 1 or more."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def non_negative(kind: type) -> Callable[[str], Any]:
    """A number of ``kind`` (``int`` or ``float``), 0 or more."""
    def parse(value: str) -> Any:
        try:
            n = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
        if not 0 <= n < float("inf"):
            raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
        return n

    return parse


def port(value: str) -> int:
    """A TCP port: 0 (any free one) to 65535."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {value!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 (any free one) to 65535, got {n}")
    return n


def memory(value: str) -> int:
    """A size in bytes: ``1048576``, ``512K``, ``256M``, ``2G`` (binary units), at least 1M."""
    text = value.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    try:
        n = float(digits) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 2G, got {value!r}") from None
    if not 2**20 <= n < float("inf"):
        raise argparse.ArgumentTypeError(f"must be at least 1M (a child's own interpreter takes more), got {value!r}")
    return int(n)


# -- one voice: usage errors in one line, global options anywhere ------------

class CliParser(CommandParser):
    """Django's parser, with a usage error as one line (exit 2) and the global options after a subcommand too.

    ``manage.py redisq dead list --limit 0`` prints
    ``manage.py redisq dead list: error: argument --limit: must be at least 1 (see --help)``
    where argparse prints the whole usage first; from ``call_command`` it is a
    ``CommandError`` with exit code 2, as Django's parser raises one.
    Subcommands added through ``add_subparsers`` are ``CliParser`` too, each
    with the global options (``GLOBAL_OPTIONS``), so ``redisq dead list --settings=x --json``
    works as ``redisq --settings=x --json dead list`` does.
    """

    hints: dict[str, str] = {}  # replaced per parser (one_voice), never mutated
    """An unrecognized option's hint, by the option: what the command takes instead."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments: "):
            hint = next((h for flag, h in self.hints.items() if flag in message.split()[2:]), "")
            message += f"; {hint}" if hint else ""
        if self.called_from_command_line:
            sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
            sys.exit(USAGE)
        raise CommandError(f"Error: {message}", returncode=USAGE)

    def add_subparsers(self, **kwargs: Any) -> Any:
        kwargs.setdefault("action", GlobalOptionsSubParsers)
        return super().add_subparsers(**kwargs)


GLOBAL_OPTIONS = frozenset({"--backend", "--json", "-v", "--verbosity", "--settings", "--pythonpath", "--traceback", "--no-color",
                            "--force-color", "--skip-checks"})


def global_options(parser: argparse.ArgumentParser) -> None:
    """The options every subcommand takes after its name as well: unset ones leave the value given before it."""
    s = argparse.SUPPRESS
    parser.add_argument("--backend", default=s, help="the TASKS alias (default: default)")
    parser.add_argument("--json", action="store_true", default=s, help="print JSON")
    parser.add_argument("-v", "--verbosity", type=int, choices=[0, 1, 2, 3], default=s, help=s)
    for name in ("--settings", "--pythonpath"):
        parser.add_argument(name, default=s, help=s)
    for name in ("--traceback", "--no-color", "--force-color", "--skip-checks"):
        parser.add_argument(name, action="store_true", default=s, help=s)


class GlobalOptionsSubParsers(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Every subcommand (and sub-subcommand) gets the global options; a module's own ``--json`` replaces ours."""

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        kwargs.setdefault("conflict_handler", "resolve")
        parser = super().add_parser(name, **kwargs)
        global_options(parser)
        return parser


def one_voice(parser: CommandParser, hints: dict[str, str] | None = None) -> CliParser:
    """Django's parser of a command, made a ``CliParser`` (Django builds it); ``hints``: what to say of an option it
    does not take, by the option (``--queue``: queues are positional)."""
    parser.__class__ = CliParser
    cli: CliParser = parser  # type: ignore[assignment]
    cli.hints = hints or {}
    return cli
