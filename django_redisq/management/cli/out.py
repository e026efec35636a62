"""How every ``manage.py redisq`` subcommand speaks: exit codes, tables, JSON, and errors as one line.

Exit codes (the same for every subcommand, and for ``runworker``):

    0  done; every threshold holds (health)
    1  the command ran and reports a failure: a health breach, ids that are not there,
       a purge not confirmed, Redis answering with an error, settings that are invalid
    2  the command line is wrong: a bad option or value (argparse), options that do not
       go together, a backend, queue or schedule the settings do not name
    3  Redis is unreachable (refused, timed out, credentials refused, no master) or too old: nothing was done

An error is one line on stderr (``CommandError: ...``); with ``--json`` stdout
also gets ``{"status": "error" | "usage" | "unreachable", "error": ..., "exit_code": N}``
so a script reading JSON always has JSON to read (``health`` adds its own
fields). A table has a header row and columns as wide as their content; a
column given a width (an error message) is cut at a word boundary with ``…``.
What Redis holds is escaped (``text.printable``) before it is measured.
"""

from __future__ import annotations

import getpass
import json
import shutil
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

from django_redisq.core.redact import redact
from django_redisq.exceptions import RedisError, RedisUnavailable
from django_redisq.management.cli.text import printable

if TYPE_CHECKING:  # runworker imports this module: the worker's start needs none of the inspector's reads
    from django_redisq.ops.inspector import Inspector

OK, FAILED, USAGE, UNREACHABLE = 0, 1, 2, 3
STATUS = {FAILED: "error", USAGE: "usage", UNREACHABLE: "unreachable"}
ELLIPSIS = "…"


def json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")


def emit(command: BaseCommand, opts: dict[str, Any], data: Any, text: str) -> None:
    """JSON (which escapes by itself), or the text with anything non-printable escaped, its lines kept.

    Each field from Redis is escaped where the text is built, newlines included
    (``printable``), so only the lines the text is made of remain lines here.
    """
    command.stdout.write(json.dumps(data, default=json_default, indent=2) if opts.get("json") else printable(text, lines=True))


def when(d: datetime | None) -> str:
    """A moment as the tables show it: to the second, UTC, one word (it never wraps)."""
    return f"{d:%Y-%m-%dT%H:%M:%SZ}" if d else "-"


# -- tables ------------------------------------------------------------------


def clip(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters: cut at the last space that fits, with an ellipsis; a word
    longer than the whole width is cut inside it (nothing better exists)."""
    if len(text) <= width:
        return text
    room = max(1, width - len(ELLIPSIS))
    cut = text[:room + 1].rfind(" ")
    head = text[:cut] if cut > room // 2 else text[:room]
    return head.rstrip(" ,;:-") + ELLIPSIS


def terminal_width() -> int:
    """The terminal's columns (``COLUMNS`` if set); 120 when stdout is not a terminal."""
    return shutil.get_terminal_size((120, 24)).columns


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = (), fill: int | None = None,
          width: int | None = None) -> list[str]:
    """Lines of a table: the header row, then one line per row, columns two spaces apart.

    Every cell is escaped (``printable``) and columns are as wide as their
    widest cell; ``right`` are the indexes of right-aligned (number) columns.
    Column ``fill`` (a message) takes what ``width`` (default: the terminal's)
    leaves, at least 30 characters, its cells cut at a word boundary.
    """
    cells = [[printable(c) for c in row] for row in rows]
    heads = [h.upper() for h in headers]
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(heads)]
    if fill is not None:
        others = sum(w for i, w in enumerate(widths) if i != fill) + 2 * (len(widths) - 1)
        widths[fill] = min(widths[fill], max(30, len(heads[fill]), (width or terminal_width()) - others))
        for row in cells:
            row[fill] = clip(row[fill], widths[fill])
    aligned = set(right)

    def line(row: Sequence[str]) -> str:
        out = [c.rjust(widths[i]) if i in aligned else c.ljust(widths[i]) for i, c in enumerate(row)]
        return "  ".join(out).rstrip()

    return [line(heads)] + [line(row) for row in cells]


# -- errors ------------------------------------------------------------------


def unreachable(alias: str, where: str, exc: BaseException) -> CommandError:
    """Redis could not be reached (or used: too old): one line naming where (never a password) and what to check, exit 3."""
    name = type(exc).__name__
    if isinstance(exc, RedisUnavailable):
        said = " ".join(redact(str(exc)).split()).rstrip(".")
    else:
        detail = " ".join(redact(str(exc)).split()).rstrip(".")
        said = f"cannot reach Redis at {where}: {name}" + (f": {detail}" if detail else "")
    if "or newer" in said:  # reached, and too old to use
        hint = f"upgrade it, or point TASKS[{alias!r}]['OPTIONS'] at a newer one"
    elif "credentials" in said:  # it says what to check already
        hint = f"see TASKS[{alias!r}]['OPTIONS']"
    elif "Authentication" in name:
        hint = f"check the password or username of TASKS[{alias!r}]['OPTIONS']"
    else:
        hint = f"is Redis running there? check TASKS[{alias!r}]['OPTIONS'] (REDIS_URL, CACHE_ALIAS or SENTINELS)"
    return CommandError(f"{said}; {hint}", returncode=UNREACHABLE)


def redis_failed(exc: BaseException) -> CommandError:
    """Redis answered, with an error (a wrong type, a script refused): one line, exit 1."""
    return CommandError(f"Redis answered with an error: {type(exc).__name__}: {' '.join(redact(str(exc)).split())}", returncode=FAILED)


def is_unreachable(exc: BaseException) -> bool:
    """Connection refused or lost, a timeout, credentials refused, no master: nothing reached Redis.

    redis-py's classes are told by name: only the store and the connection layer import redis
    (exceptions.py names its base error alone for the rest).
    """
    if isinstance(exc, RedisUnavailable | OSError):
        return True
    return isinstance(exc, RedisError) and any(
        c.__name__ in ("ConnectionError", "TimeoutError", "ClusterDownError", "SlotNotCoveredError") for c in type(exc).__mro__)


def usage(message: str) -> CommandError:
    """A command line that cannot be right: one line, exit 2."""
    return CommandError(message, returncode=USAGE)


class Reported(CommandError):
    """A failure the command has printed its JSON for already (``cancel`` with missing ids): no second document."""


def json_error(command: BaseCommand, opts: dict[str, Any], error: CommandError, **extra: Any) -> None:
    """With ``--json``, the error as JSON on stdout too (the line still goes to stderr)."""
    if opts.get("json") and not isinstance(error, Reported):
        code = getattr(error, "returncode", FAILED)
        command.stdout.write(json.dumps({"status": STATUS.get(code, "error"), "error": str(error), "exit_code": code, **extra},
                                        indent=2))


# -- what several subcommands need -------------------------------------------


def queue_of(ins: Inspector, opts: dict[str, Any]) -> str:
    """The queue ``--queue`` names (default: the first configured); ``UnknownQueue`` (exit 2) for one not configured."""
    queue = opts.get("queue") or ins.queues[0]
    ins.keys(queue)
    return queue


def who() -> str:
    """Who acts, for a pause or a run now: ``manage.py redisq (<login name>)``."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (OSError, KeyError): say so, still act
        user = "unknown user"
    return f"manage.py redisq ({user})"
