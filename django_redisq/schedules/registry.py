"""Periodic schedules: the registry, their validation, and the tick arithmetic (their words: words.py).

A schedule comes from ``TASKS[alias]["OPTIONS"]["SCHEDULES"]`` (the public
contract: operators change it without code) or from ``@periodic`` beside a
task; both end in one registry, the settings winning on a name given twice.

Ticks are instants in Redis milliseconds since the epoch. ``every`` ticks are
the multiples of the period since the Unix epoch (``every=300`` fires at :00,
:05, ...); ``cron`` ticks come from cronsim in the schedule's time zone, which
treats DST as Debian cron does: a job whose time falls in a skipped hour runs
once at the jump, a job at a fixed time runs once in a repeated hour (its
first pass), and ``*``-hour jobs follow real elapsed time. Nothing here talks
to Redis or reads a clock: the scheduler passes in the Redis time.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.conf import settings
from django.core.checks import Error
from django.utils.module_loading import autodiscover_modules, import_string

from django_redisq.core.message import encode_arguments
from django_redisq.core.options import NAME_RE
from django_redisq.core.redact import redact
from django_redisq.schedules.words import cron_in_words, every_in_words
from django_redisq.task import find_registered, get_registered, plain_signature

T = TypeVar("T")

OPTIONS = ("task", "cron", "every", "args", "kwargs", "timezone", "queue_name", "catch_up", "allow_overlap")
CATCH_UP = ("latest", "skip", "all")
ALIASES = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *", "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *",
}
TICK_KWARG = "periodic_tick"
"""A task whose function takes this keyword gets its tick, as an ISO 8601 text in the schedule's time zone."""
ON_TIME_MS = 10_000
"""A tick seen this late (or a period, if shorter) still counts as on time (``catch_up="skip"`` runs it)."""
LATEST_WINDOW_MS = 3_600_000
"""``catch_up="latest"`` runs the newest missed tick if it is younger than this (or its period, if shorter)."""
ALL_MAX = 100
"""``catch_up="all"`` runs at most this many missed ticks (the newest); older ones are counted as missed."""
COUNT_MAX = 10_000
"""Missed cron ticks are counted up to this many per gap."""
MIN_EVERY_MS = 1000

_code: dict[tuple[str, str], dict[str, Any]] = {}
"""(backend alias, name) -> entry, from @periodic."""


def periodic(name: str, **entry: Any) -> Callable[[T], T]:
    """Add a schedule for the decorated task, from code; stack it on ``@task``::

        @periodic("sync-stock", every=300, kwargs={"full": False})
        @task
        def sync_stock(full: bool) -> None: ...

    ``entry`` takes the options of a ``SCHEDULES`` entry except ``task``. It is
    checked with the settings (system checks); an entry of the same name in
    ``SCHEDULES`` replaces it.
    """

    def register(task: T) -> T:
        path = getattr(task, "module_path", None)
        alias = getattr(task, "backend", "default")
        if not isinstance(path, str):
            raise TypeError("@periodic goes above @task: it schedules a task, not a plain function")
        _code[(alias, name)] = {"task": path, **entry}
        return task

    return register


def entries(alias: str, settings_schedules: Any) -> dict[str, Any]:
    """Every schedule entry of a backend alias, code first, settings over them."""
    out: dict[str, Any] = {n: e for (a, n), e in _code.items() if a == alias}
    if isinstance(settings_schedules, dict):
        out.update(settings_schedules)
    return out


@dataclass(frozen=True)
class Schedule:
    name: str
    task: str
    queue: str
    tz: ZoneInfo
    cron: str | None = None
    every_ms: int = 0
    args: list[Any] = field(default_factory=list, hash=False)
    kwargs: dict[str, Any] = field(default_factory=dict, hash=False)
    catch_up: str = "latest"
    allow_overlap: bool = True

    @property
    def expression(self) -> str:
        return self.cron if self.cron is not None else f"every {self.every_ms / 1000:g} s"

    @property
    def in_words(self) -> str:
        """The expression as an operator reads it: "every 5 minutes", "daily at 03:00", else the raw cron expression."""
        return every_in_words(self.every_ms) if self.cron is None else cron_in_words(self.cron)

    # -- ticks -----------------------------------------------------------

    def _dt(self, ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, self.tz)

    def next_after(self, ms: int) -> int:
        """The first tick strictly after ``ms``."""
        if self.every_ms:
            return (ms // self.every_ms + 1) * self.every_ms
        assert self.cron is not None
        for t in CronSim(self.cron, self._dt(ms)):
            tick = int(t.timestamp()) * 1000
            if tick > ms:  # cronsim steps in local time: in a repeated hour it may answer an earlier instant
                return tick
        raise ValueError(f"schedule {self.name!r}: {self.cron!r} has no next run")  # pragma: no cover (cronsim stops after 50 years)

    def latest_at(self, ms: int) -> int | None:
        """The last tick at or before ``ms`` (None if there is none in 50 years)."""
        if self.every_ms:
            return ms // self.every_ms * self.every_ms
        assert self.cron is not None
        back = ms
        for _ in range(8):
            try:  # cronsim's reverse pass may land early around DST, never late: walk forward from it
                guess = int(next(CronSim(self.cron, self._dt(back + 1), reverse=True)).timestamp()) * 1000
            except StopIteration:
                return None
            found, x = None, min(guess, ms) - 1
            while (n := self.next_after(x)) <= ms:
                found, x = n, n
            if found is not None:
                return found
            back = guess - 1000
        return None  # pragma: no cover

    def period_at(self, tick: int) -> int:
        """Ms from ``tick`` to the next one."""
        return self.every_ms or self.next_after(tick) - tick

    def due(self, after: int, upto: int, limit: int) -> tuple[list[int], int]:
        """Ticks in ``(after, upto]``: the newest ``limit`` of them (ascending) and how many there are in all."""
        if upto <= after:
            return [], 0
        if self.every_ms:
            newest = upto // self.every_ms
            total = newest - after // self.every_ms
            return [k * self.every_ms for k in range(newest - min(total, limit) + 1, newest + 1)], total
        newest_first: list[int] = []
        t = self.latest_at(upto)
        while t is not None and t > after and len(newest_first) < limit:
            newest_first.append(t)
            t = self.latest_at(t - 1)
        total = len(newest_first)
        if t is not None and t > after:  # more than limit: count the rest from the old end, up to COUNT_MAX
            x, oldest = after, newest_first[-1]
            while total < COUNT_MAX and (x := self.next_after(x)) < oldest:
                total += 1
        return newest_first[::-1], total

    def tick_text(self, tick: int) -> str:
        return self._dt(tick).isoformat()


# -- building and checking --------------------------------------------------


def cron_expression(value: str) -> str:
    """The 5-field expression of ``value`` (an alias resolved); ``ValueError`` if it is not one."""
    expr = ALIASES.get(value.strip().lower(), value.strip()) if isinstance(value, str) else value
    if not isinstance(expr, str) or len(expr.split()) != 5:
        raise ValueError(f"cron {value!r} is not a 5-field cron expression or one of {', '.join(ALIASES)}")
    try:
        CronSim(expr, datetime(2000, 1, 1))
    except (CronSimError, ValueError) as exc:
        raise ValueError(f"cron {value!r} is not a valid expression: {exc}") from None
    return expr


def every_ms(value: Any) -> int:
    if isinstance(value, timedelta):
        ms = int(value.total_seconds() * 1000)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        ms = int(value * 1000)
    else:
        raise ValueError(f"every must be seconds (a number) or a timedelta, got {value!r}")
    if ms < MIN_EVERY_MS:
        raise ValueError(f"every must be at least {MIN_EVERY_MS / 1000:g} s, got {value!r}")
    return ms


@dataclass(frozen=True)
class Problem:
    id: str
    msg: str
    hint: str


def _unfit(task: Any, args: Any, kwargs: dict[str, Any]) -> tuple[str, str] | None:
    """(the signature, why) when a call with ``args`` / ``kwargs`` could not run ``task``, as the worker binds it."""
    try:
        sig = inspect.signature(task.func)
    except (TypeError, ValueError):
        return None
    tick = {TICK_KWARG: ""} if TICK_KWARG in sig.parameters else {}  # the worker adds it (schedules/ticks.py)
    try:
        sig.bind(*([None] if task.takes_context else []), *args, **kwargs, **tick)
    except TypeError as exc:
        return plain_signature(sig), str(exc)
    return None


def build(name: str, entry: Any, queues: tuple[str, ...], default_tz: str, find_task: Callable[[str], Any]) -> tuple[Schedule | None, list[Problem]]:
    """A Schedule from one entry, or None and every problem with it (ids E020-E028)."""
    where = f"SCHEDULES[{name!r}]"
    refused = _refused(name, entry, where)
    if refused is not None:
        return None, [refused]
    problems = [Problem("E021", f"{where} has an unknown option {key!r}.", f"Known options: {', '.join(OPTIONS)}.")
                for key in sorted(set(entry) - set(OPTIONS), key=str)]
    expr, ms = _timing(where, entry, problems)
    tz = _zone(where, entry.get("timezone", default_tz), problems)
    path = entry.get("task")
    task = find_task(path) if isinstance(path, str) and path else None
    queue = _queue(where, entry, path, task, queues, problems)
    args, kwargs = entry.get("args", []), entry.get("kwargs", {})
    _check_arguments(where, path, task, args, kwargs, problems)
    catch_up, overlap = entry.get("catch_up", "latest"), entry.get("allow_overlap", True)
    _check_policies(where, catch_up, overlap, problems)
    if problems or tz is None or task is None:
        return None, problems
    return Schedule(name=name, task=path, queue=queue, tz=tz, cron=expr, every_ms=ms, args=list(args), kwargs=dict(kwargs),  # type: ignore[arg-type]
                    catch_up=catch_up, allow_overlap=overlap), []


def _refused(name: Any, entry: Any, where: str) -> Problem | None:
    """The one problem of a name or an entry that cannot be read at all (E020)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        return Problem("E020", f"{where}: a schedule name must be 1-100 letters, digits, '_', '-' or '.'.", "Rename the schedule.")
    if not isinstance(entry, dict):
        return Problem("E020", f"{where} must be a dict, got {type(entry).__name__}.", 'For example {"task": "app.tasks.f", "every": 60}.')
    return None


def _timing(where: str, entry: dict[str, Any], problems: list[Problem]) -> tuple[str | None, int]:
    """The cron expression or the period in ms (exactly one of them; E022, E023)."""
    cron, every = entry.get("cron"), entry.get("every")
    if (cron is None) == (every is None):
        problems.append(Problem("E022", f"{where} needs exactly one of 'cron' and 'every'.", 'E.g. "cron": "0 3 * * *" or "every": 300.'))
        return None, 0
    try:
        return (cron_expression(cron), 0) if cron is not None else (None, every_ms(every))
    except ValueError as exc:
        problems.append(Problem("E023", f"{where}: {exc}.", "cron: 5 fields (minute hour day month weekday) or @hourly/@daily/...; every: seconds >= 1."))
        return None, 0


def _zone(where: str, tz_name: Any, problems: list[Problem]) -> ZoneInfo | None:
    try:
        return ZoneInfo(tz_name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        problems.append(Problem("E024", f"{where}: unknown time zone {tz_name!r}.", 'Use an IANA name such as "Europe/Berlin" or "UTC".'))
        return None


def _queue(where: str, entry: dict[str, Any], path: Any, task: Any, queues: tuple[str, ...], problems: list[Problem]) -> Any:
    """The queue the ticks go to: the entry's, else the task's (E025 for no task, E026 for a queue not served)."""
    if task is None:
        problems.append(Problem("E025", f"{where}: {path!r} is not a registered django_redisq task.",
                                "Give the dotted path of a function decorated with @task in an installed app's tasks module."))
    queue = entry.get("queue_name") or (task.queue_name if task is not None else None)
    if task is not None and queue not in queues:
        problems.append(Problem("E026", f"{where}: queue {queue!r} is not in QUEUES {list(queues)}.", "Add it to QUEUES or set queue_name."))
    return queue


def _check_arguments(where: str, path: Any, task: Any, args: Any, kwargs: Any, problems: list[Problem]) -> None:
    """The arguments are JSON (E027) and fit the task's signature (E028)."""
    if not isinstance(args, (list, tuple)) or not isinstance(kwargs, dict) or any(not isinstance(k, str) for k in kwargs):
        problems.append(Problem("E027", f"{where}: args must be a list and kwargs a dict with str keys.", "Use JSON values."))
        return
    try:
        encode_arguments(args, kwargs, 1 << 20)
    except Exception as exc:  # noqa: BLE001 - InvalidArguments says what does not encode
        problems.append(Problem("E027", f"{where}: {exc}", "Use JSON values."))
        return
    unfit = _unfit(task, args, kwargs) if task is not None else None
    if unfit:
        problems.append(Problem("E028", f"{where}: args {list(args)!r} and kwargs {kwargs!r} do not fit {path}{unfit[0]}: {unfit[1]}.",
                                "Give the arguments the task takes; otherwise every tick's task is dead-lettered as bad_arguments."))


def _check_policies(where: str, catch_up: Any, overlap: Any, problems: list[Problem]) -> None:
    if catch_up not in CATCH_UP:
        problems.append(Problem("E027", f"{where}: catch_up must be one of {', '.join(CATCH_UP)}, got {catch_up!r}.", 'The default is "latest".'))
    if not isinstance(overlap, bool):
        problems.append(Problem("E027", f"{where}: allow_overlap must be True or False, got {overlap!r}.", "The default is True."))


def find_task(path: str) -> Any:
    """The registered task of a dotted path from settings (loading the apps' tasks modules first)."""
    found = find_registered(path, lambda: autodiscover_modules("tasks"))
    if found is None and re.match(r"^[A-Za-z_][\w.]*\.[A-Za-z_]\w*$", path):
        try:  # settings are trusted: a task outside a tasks module registers on import
            import_string(path)
        except ImportError:
            return None
        found = get_registered(path)
    return found


def load(alias: str, queues: tuple[str, ...], settings_schedules: Any) -> tuple[list[Schedule], dict[str, list[Problem]]]:
    """Every valid schedule of a backend, and the problems of the others by name (never with a credential in them)."""
    default_tz = getattr(settings, "TIME_ZONE", None) or "UTC"
    good: list[Schedule] = []
    bad: dict[str, list[Problem]] = {}
    if settings_schedules is not None and not isinstance(settings_schedules, dict):
        bad["SCHEDULES"] = [Problem("E020", "SCHEDULES must be a dict of name -> schedule.",
                                    'For example {"nightly": {"task": "app.tasks.f", "cron": "0 3 * * *"}}.')]
    for name, entry in entries(alias, settings_schedules).items():
        schedule, problems = build(name, entry, queues, default_tz, find_task)
        if schedule is not None:
            good.append(schedule)
        else:
            bad[str(name)] = problems
    return good, {name: [Problem(p.id, redact(p.msg), redact(p.hint)) for p in problems] for name, problems in bad.items()}


def check_errors(alias: str, params: Any, obj: Any = None) -> list[Any]:
    """System check errors for the schedules of ``TASKS[alias]`` (run once the apps are loaded)."""
    if not isinstance(params, dict) or not isinstance(params.get("OPTIONS", {}), dict):
        return []  # conf.validate reports it
    queues = params.get("QUEUES", ["default"])
    queues = tuple(queues) if isinstance(queues, (list, tuple)) else ()
    _, bad = load(alias, queues, params.get("OPTIONS", {}).get("SCHEDULES"))
    return [Error(p.msg, hint=p.hint, obj=obj, id=f"django_redisq.{p.id}") for problems in bad.values() for p in problems]
