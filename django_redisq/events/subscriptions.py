"""Events settings: ``SUBSCRIPTIONS`` and ``TOPICS`` of ``TASKS[alias]["OPTIONS"]``, read and checked.

A topic is a Redis stream; a subscription is one consumer group on it whose
every entry becomes one ordinary task (worker/background/pump.py). Both are read from the
settings alone, so the publisher (events/publish.py), the worker's pump, the operators'
views (ops/topics.py) and the system checks agree on what exists. Check ids:
E100-E108. A bad subscription is reported by the checks and skipped (and
logged) by a worker, like a bad schedule.
"""

from __future__ import annotations

import hashlib
import inspect
import math
from dataclasses import dataclass
from typing import Any

from django.core.checks import Error

from django_redisq.core.options import NAME_RE, Options
from django_redisq.core.redact import redact, shown
from django_redisq.schedules.registry import find_task

STARTS = ("latest", "earliest")
"""``latest``: events published after the subscription first exists; ``earliest``: everything retained."""
SUB_KEYS = ("topic", "task", "queue_name", "start")
TOPIC_KEYS = ("MAX_AGE", "MAX_LEN", "HARD_MAX_LEN", "HEALTH_MAX_LAG")
DEFAULT_MAX_AGE = 7 * 86400.0
"""Seconds an event is kept at least once every subscription has turned it into a task (default retention)."""
DEFAULT_HARD_MAX_LEN = 1_000_000
"""Entries a topic keeps at most, even those a lagging subscription has not read (then counted as dropped)."""
DEFAULT_HEALTH_MAX_LAG = 10_000
"""A subscription further behind than this many entries is a breach of ``redisq health``."""
EVENT_KWARGS = ("event_id", "topic")
LIFECYCLE_TOPIC = "redisq.tasks"
"""The built-in topic of task transitions, with ``LIFECYCLE_EVENTS: True`` (events/lifecycle.py)."""
START_IDS = {"latest": "$", "earliest": "0"}


@dataclass(frozen=True)
class Topic:
    """A topic's retention: ``max_age`` seconds (0 = none), ``max_len`` entries (0 = none), the hard cap, the alert."""

    name: str
    max_age: float = DEFAULT_MAX_AGE
    max_len: int = 0
    hard_max_len: int = DEFAULT_HARD_MAX_LEN
    health_max_lag: int = DEFAULT_HEALTH_MAX_LAG


@dataclass(frozen=True)
class Subscription:
    """One consumer group of a topic feeding one task on one queue."""

    name: str
    topic: str
    task: str
    queue: str
    start: str = "latest"

    @property
    def id_base(self) -> str:
        """Task ids of this subscription are ``e<digest>-<generation>-<entry id>``: one per (subscription, generation,
        entry); the digest keeps a subscription's ids apart from another's whatever their names."""
        return "e" + hashlib.sha256(f"{self.topic}:{self.name}".encode()).hexdigest()[:12] + "-"

    def task_id(self, generation: int, entry_id: str) -> str:
        return f"{self.id_base}{generation}-{entry_id}"


def _positive(value: Any, kind: type) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int,) if kind is int else (int, float)):
        return False
    return math.isfinite(value) and value > 0


def topics_of(options: Options) -> dict[str, Topic]:
    """Every topic of the alias: those in TOPICS and those a subscription names (default retention); bad ones skipped."""
    found: dict[str, Topic] = {}
    raw = options.topics if isinstance(options.topics, dict) else {}
    for name, entry in raw.items():
        if isinstance(name, str) and NAME_RE.match(name) and isinstance(entry, dict) and not _topic_problems("", entry):
            found[name] = Topic(name, float(entry.get("MAX_AGE", DEFAULT_MAX_AGE)), int(entry.get("MAX_LEN", 0)),
                                int(entry.get("HARD_MAX_LEN", DEFAULT_HARD_MAX_LEN)),
                                int(entry.get("HEALTH_MAX_LAG", DEFAULT_HEALTH_MAX_LAG)))
    for sub in subscriptions_of(options):
        found.setdefault(sub.topic, Topic(sub.topic))
    if options.lifecycle_events:
        found.setdefault(LIFECYCLE_TOPIC, Topic(LIFECYCLE_TOPIC))
    return found


@dataclass(frozen=True)
class Plan:
    """What a publisher needs, built once per Options object: each topic's ``(group, start id)`` (every topic a
    publish may name), and the task id prefixes of the subscriptions to the lifecycle topic (events/lifecycle.py)."""

    groups: dict[str, list[tuple[str, str]]]
    lifecycle_bases: tuple[str, ...]


_plans: dict[str, tuple[Options, Plan]] = {}


def publish_plan(options: Options) -> Plan:
    """The alias's Plan, kept while its Options object lives (a settings change builds a new one)."""
    cached = _plans.get(options.alias)
    if cached is None or cached[0] is not options:
        subs = subscriptions_of(options)
        plan = Plan({t: [(s.name, START_IDS[s.start]) for s in subs if s.topic == t] for t in topics_of(options)},
                    tuple(s.id_base for s in subs if s.topic == LIFECYCLE_TOPIC))
        cached = _plans[options.alias] = (options, plan)
    return cached[1]


def subscriptions_of(options: Options) -> list[Subscription]:
    """The well-formed subscriptions of the alias (their task is not looked up here: see ``problems``)."""
    raw = options.subscriptions if isinstance(options.subscriptions, dict) else {}
    subs = []
    for name, entry in raw.items():
        if _shape_problems("", name, entry, options.queues):
            continue
        task = entry["task"]
        queue = entry.get("queue_name") or _task_queue(task) or "default"
        if queue not in options.queues:
            continue
        subs.append(Subscription(name, entry["topic"], task, queue, entry.get("start", "latest")))
    return subs


def _task_queue(path: str) -> str | None:
    found = find_task(path)
    return getattr(found, "queue_name", None) if found is not None else None


def _shape_problems(where: str, name: Any, entry: Any, queues: Any) -> list[tuple[str, str, str]]:
    w = f"{where}[{shown(name)}]"
    if not isinstance(name, str) or not NAME_RE.match(name):
        return [("E100", f"{w}: a subscription name must be 1-100 letters, digits, '_', '-' or '.'.", "Rename the subscription.")]
    if not isinstance(entry, dict):
        return [("E100", f"{w} must be a dict, got {type(entry).__name__}.",
                 'For example {"topic": "orders.placed", "task": "billing.tasks.charge"}.')]
    problems = [("E100", f"{w} has an unknown key {shown(k)}.", f"Known keys: {', '.join(SUB_KEYS)}.")
                for k in entry if k not in SUB_KEYS]
    topic = entry.get("topic")
    if not isinstance(topic, str) or not NAME_RE.match(topic):
        problems.append(("E103", f"{w}: topic {shown(topic)} is not a valid topic name.",
                         "Use 1-100 letters, digits, '_', '-' or '.' (no braces, colons or spaces), e.g. \"orders.placed\"."))
    if not isinstance(entry.get("task"), str):
        problems.append(("E101", f"{w}: 'task' must be the dotted path of a django_redisq task, got {shown(entry.get('task'))}.",
                         'For example "billing.tasks.charge".'))
    queue = entry.get("queue_name")
    if queue is not None and queue not in queues:
        problems.append(("E102", f"{w}: queue_name {shown(queue)} is not in QUEUES {list(queues)}.",
                         "Add it to QUEUES, or leave queue_name out to use the task's queue."))
    if entry.get("start", "latest") not in STARTS:
        problems.append(("E104", f"{w}: start must be one of {', '.join(STARTS)}, got {shown(entry.get('start'))}.",
                         '"latest" (the default): events published after the subscription first exists; '
                         '"earliest": every event the topic still retains.'))
    return problems


def _topic_problems(w: str, entry: Any) -> list[tuple[str, str, str]]:
    if not isinstance(entry, dict):
        return [("E105", f"{w} must be a dict of retention options, got {type(entry).__name__}.",
                 'For example {"MAX_AGE": 86400, "MAX_LEN": 100000}.')]
    problems = [("E105", f"{w} has an unknown option {shown(k)}.", f"Known options: {', '.join(TOPIC_KEYS)}.")
                for k in entry if k not in TOPIC_KEYS]
    for key in TOPIC_KEYS:
        if key in entry and not _positive(entry[key], float if key == "MAX_AGE" else int):
            problems.append(("E106", f"{w}: {key} must be a positive {'number' if key == 'MAX_AGE' else 'whole number'}, "
                             f"got {shown(entry[key])}.",
                             "MAX_AGE: seconds; MAX_LEN, HARD_MAX_LEN, HEALTH_MAX_LAG: entries."))
    if not problems and entry.get("MAX_LEN", 0) > entry.get("HARD_MAX_LEN", DEFAULT_HARD_MAX_LEN):
        problems.append(("E106", f"{w}: MAX_LEN ({entry['MAX_LEN']}) exceeds HARD_MAX_LEN "
                         f"({entry.get('HARD_MAX_LEN', DEFAULT_HARD_MAX_LEN)}).",
                         "HARD_MAX_LEN is the cap beyond which even unread events are dropped; keep it above MAX_LEN."))
    return problems


def problems(params: Any) -> list[tuple[str, str, str]]:
    """Every problem of the SUBSCRIPTIONS and TOPICS of ``TASKS[alias]`` as ``(id, message, hint)``, tasks looked up."""
    if not isinstance(params, dict) or not isinstance(params.get("OPTIONS", {}), dict):
        return []  # conf.validate reports it
    opts = params.get("OPTIONS", {})
    queues = params.get("QUEUES", ["default"])
    queues = tuple(queues) if isinstance(queues, (list, tuple)) else ()
    found: list[tuple[str, str, str]] = []
    subs, topics = opts.get("SUBSCRIPTIONS", {}), opts.get("TOPICS", {})
    if not isinstance(subs, dict):
        found.append(("E100", "SUBSCRIPTIONS must be a dict of name -> subscription.",
                      'For example {"mail-on-order": {"topic": "orders.placed", "task": "mail.tasks.confirm"}}.'))
        subs = {}
    if not isinstance(topics, dict):
        found.append(("E105", "TOPICS must be a dict of topic name -> retention.", 'For example {"orders.placed": {"MAX_AGE": 86400}}.'))
        topics = {}
    if not isinstance(opts.get("LIFECYCLE_EVENTS", False), bool):
        found.append(("E108", f"LIFECYCLE_EVENTS must be True or False, got {shown(opts['LIFECYCLE_EVENTS'])}.",
                      f"True publishes every task's transitions to the topic {LIFECYCLE_TOPIC!r}; the default is False."))
    for name, entry in topics.items():
        w = f"TOPICS[{shown(name)}]"
        if not isinstance(name, str) or not NAME_RE.match(name):
            found.append(("E103", f"{w}: not a valid topic name.", "Use 1-100 letters, digits, '_', '-' or '.'."))
            continue
        found += _topic_problems(w, entry)
    for name, entry in subs.items():
        shape = _shape_problems("SUBSCRIPTIONS", name, entry, queues)
        found += shape
        if shape:
            continue
        w = f"SUBSCRIPTIONS[{name!r}]"
        task = find_task(entry["task"])
        if task is None:
            found.append(("E101", f"{w}: {entry['task']!r} is not a registered django_redisq task.",
                          "Give the dotted path of a function decorated with @task (e.g. \"billing.tasks.charge\")."))
            continue
        queue = entry.get("queue_name") or getattr(task, "queue_name", "default")
        if queue not in queues:
            found.append(("E102", f"{w}: the task's queue {queue!r} is not in QUEUES {list(queues)}.",
                          "Add it to QUEUES or set queue_name."))
        if (why := unfit(task)) is not None:
            found.append(("E107", f"{w}: {entry['task']} cannot take an event: {why}.",
                          "A subscription's task is called with the payload (a dict) as its one positional argument, "
                          "and event_id= / topic= if it accepts them."))
    return found


def unfit(task: Any) -> str | None:
    """Why ``task`` cannot be called as ``task(payload[, event_id=..., topic=...])``, or None."""
    func = getattr(task, "func", None)
    if func is None:
        return None
    params = list(inspect.signature(func).parameters.values())
    if getattr(task, "takes_context", False) and params:
        params = params[1:]
    sig = inspect.Signature(params)
    kwargs = {k: "" for k in EVENT_KWARGS if k in sig.parameters or any(p.kind is p.VAR_KEYWORD for p in params)}
    try:
        sig.bind(object(), **kwargs)
    except TypeError as exc:
        return str(exc)
    return None


def event_kwargs(task: Any, event_id: str, topic: str) -> dict[str, str]:
    """The keywords of EVENT_KWARGS the task's function accepts (``**kwargs`` accepts both)."""
    func = getattr(task, "func", None)
    if func is None:
        return {}
    params = inspect.signature(func).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return {"event_id": event_id, "topic": topic}
    values = {"event_id": event_id, "topic": topic}
    return {k: v for k, v in values.items() if k in params}


def check_errors(alias: str, params: Any, obj: Any = None) -> list[Any]:
    """System check errors for SUBSCRIPTIONS and TOPICS of ``TASKS[alias]`` (run once the apps are loaded)."""
    return [Error(redact(msg), hint=redact(hint), obj=obj, id=f"django_redisq.{cid}") for cid, msg, hint in problems(params)]
