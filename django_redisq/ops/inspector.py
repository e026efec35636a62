"""Read-only views of the queues, shared by the admin, ``manage.py redisq`` and metrics.

Nothing here changes Redis, and nothing here talks to it: ``Inspector`` is the
store's bounded reads (``QueueReads``: a queue's figures, store/reads/queues.py;
``TaskReads``: the tasks in it, store/reads/tasks.py) found by backend alias. The
periodic schedules' rows, which join the settings with their markers, are at the
end of this module.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from django_redisq.backend import RedisQueueBackend
from django_redisq.core.clock import ms_to_datetime
from django_redisq.exceptions import RedisQError, TaskNotFound, UnknownQueue
from django_redisq.schedules.registry import Problem, Schedule, load
from django_redisq.settings import discovery
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.reads.dead_scan import DeadFilter
from django_redisq.store.reads.queues import QueueReads
from django_redisq.store.reads.records import Attempt, Pagination, QueueFigures, QueueStats, Scan, TaskDetail, TaskRow, WorkerInfo
from django_redisq.store.server import EmbeddedServer, embedded_server
from django_redisq.store.steps.durable import StepRecord

logger = logging.getLogger("django_redisq")

__all__ = [
    "Attempt",
    "DeadFilter",
    "Inspector",
    "Pagination",
    "QueueFigures",
    "QueueStats",
    "Scan",
    "ScheduleRow",
    "StepRecord",
    "TaskDetail",
    "TaskRow",
    "UnknownQueue",
    "UnknownSchedule",
    "WorkerInfo",
    "backend_aliases",
    "find_schedule",
    "schedule_rows",
]

def backend_aliases() -> list[str]:
    """Aliases in ``TASKS`` served by django_redisq's backend, in settings order."""
    found = []
    for alias, params in getattr(settings, "TASKS", {}).items():
        try:
            cls = import_string(params.get("BACKEND", ""))
        except ImportError:
            continue
        if isinstance(cls, type) and issubclass(cls, RedisQueueBackend):
            found.append(alias)
    return found


class Inspector(QueueReads):
    """Read-only access to one backend alias's queues: the store's bounded reads, found by alias."""

    @classmethod
    def for_alias(cls, alias: str = "default") -> Inspector:
        if alias not in backend_aliases():
            raise UnknownQueue(f"TASKS has no django_redisq backend {alias!r}")
        return cls(get_options(alias))

    def steps(self, queue: str, task_id: str) -> list[StepRecord]:
        """A durable task's recorded steps, sleeps and waits, in the order they ran (none: an empty list)."""
        try:
            return sorted(Broker(self.options, self.client).durable.load(queue, task_id)[1].values(), key=lambda x: x.index)
        except TaskNotFound:
            return []

    def embedded(self) -> EmbeddedServer:
        """The backend's embedded server (``EMBEDDED``), to report on or stop; it is not started by asking."""
        return embedded_server(self.options)


# -- periodic schedules ------------------------------------------------------


class UnknownSchedule(RedisQError, LookupError):
    """A schedule the settings do not name, or one they name with errors (it is not run)."""


def schedules(ins: Inspector) -> tuple[list[Schedule], dict[str, list[Problem]]]:
    """The alias's valid schedules and the others' problems, with its tasks modules imported first.

    ``@periodic`` adds a schedule when its module is imported. A worker imports the apps' ``tasks`` modules and
    ``IMPORTS`` at its start, and the system checks do; ``manage.py redisq`` run with ``--skip-checks`` (or
    ``call_command``, which skips them) and a web process serving the admin may not have yet, and saw no schedule
    from code ("no schedules", "no schedule 'x'"). A module that fails to import is the checks' and the worker's to
    report: the schedules from the settings are still shown."""
    try:
        discovery.load(discovery.imports_of(getattr(settings, "TASKS", {}).get(ins.options.alias)))
    except Exception:
        logger.warning("could not import the tasks modules of %r: schedules from @periodic may be missing", ins.options.alias,
                       exc_info=True)
    return load(ins.options.alias, ins.options.queues, ins.options.schedules)


def find_schedule(ins: Inspector, name: str) -> Schedule:
    """The configured, valid schedule ``name`` of the alias; ``UnknownSchedule`` (saying why) otherwise."""
    good, bad = schedules(ins)
    for s in good:
        if s.name == name:
            return s
    if name in bad:
        raise UnknownSchedule(f"schedule {name!r} has errors and is not run: " + " ".join(f"[{p.id}] {p.msg}" for p in bad[name]))
    raise UnknownSchedule(f"no schedule {name!r} in TASKS[{ins.options.alias!r}] (SCHEDULES or @periodic)")


@dataclass(frozen=True)
class ScheduleRow:
    """One periodic schedule as the admin and ``redisq schedules`` show it (times on the Redis clock)."""

    name: str
    task: str
    queue: str
    expression: str
    timezone: str
    catch_up: str
    allow_overlap: bool
    next_run: datetime | None
    last_run: datetime | None  # the tick of the last task enqueued, or when the last "run now" was, if later
    last_id: str
    fired: int
    missed: int
    skipped: int
    problems: list[str]
    description: str = ""  # the expression in words ("daily at 03:00")
    paused: bool = False
    paused_at: datetime | None = None
    paused_by: str = ""
    paused_ticks: int = 0  # ticks not run because the schedule was paused
    last_state: str = ""  # the last task's state; '' once its hash has expired (or there is none)
    last_manual: bool = False  # the last run was a "run now"


def _count(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def schedule_rows(ins: Inspector) -> list[ScheduleRow]:
    """Every schedule of the alias, valid or not, with its marker and its last task's state, in two round trips."""
    good, bad = schedules(ins)
    now = ins.now_ms()
    markers = ins.schedule_markers([(s.queue, s.name) for s in good])
    last: list[tuple[int, str, bool]] = []  # (ms, task id, run now) of each schedule's last run
    for m in markers:
        tick, manual = _count(m.get("last_run")), _count(m.get("manual_at"))
        if manual > tick and m.get("manual_id"):
            last.append((manual, m["manual_id"], True))
        else:
            last.append((tick, m.get("last_id", ""), False))
    states = ins.task_states([(s.queue, task_id) for s, (_, task_id, _) in zip(good, last, strict=True)])

    rows = [
        ScheduleRow(s.name, s.task, s.queue, s.expression, s.tz.key, s.catch_up, s.allow_overlap,
                    ms_to_datetime(s.next_after(now)), ms_to_datetime(at), task_id,
                    _count(m.get("fired")), _count(m.get("missed")), _count(m.get("skipped")), [],
                    description=s.in_words, paused=bool(m.get("paused")), paused_at=ms_to_datetime(m.get("paused")),
                    paused_by=m.get("paused_by", ""), paused_ticks=_count(m.get("paused_ticks")),
                    last_state=state or "", last_manual=manual)
        for s, m, (at, task_id, manual), state in zip(good, markers, last, states, strict=True)
    ]
    rows += [ScheduleRow(name, "", "", "", "", "", True, None, None, "", 0, 0, 0, [f"[{p.id}] {p.msg}" for p in ps])
             for name, ps in bad.items()]
    return sorted(rows, key=lambda r: r.name)
