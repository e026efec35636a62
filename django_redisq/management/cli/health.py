"""``manage.py redisq health``: exit 0 when every threshold holds, 1 naming each breach, 3 when Redis is unreachable.

    redisq health [--max-pending N] [--max-age SECONDS] [--max-dead N] [--min-workers N] [--queue Q ...] [--json]

Kept out of redisq.py (a module per subcommand family). Thresholds on the
command line apply to every queue checked and override ``OPTIONS["HEALTH"]``.
A usage error exits 2 and Redis unreachable 3 (one line on stderr; with
``--json`` also ``{"status": "unreachable", ...}`` on stdout), as for every
subcommand (out.py): a probe tells "breached" from "could not look".
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from django_redisq.exceptions import RedisError
from django_redisq.management.cli import out
from django_redisq.management.cli.args import non_negative
from django_redisq.management.cli.text import printable
from django_redisq.ops.inspector import Inspector
from django_redisq.ops.topics import TopicOps
from django_redisq.settings.health import Thresholds, breaches, configured

OK, BREACHED, UNREACHABLE = out.OK, out.FAILED, out.UNREACHABLE


def add_parser(sub: Any) -> None:
    p = sub.add_parser("health", help="check thresholds: exit 0 if all hold, 1 naming each breach, 3 if Redis is unreachable")
    p.add_argument("--max-pending", type=non_negative(int), metavar="N", help="at most N tasks pending per queue")
    p.add_argument("--max-age", type=non_negative(float), metavar="SECONDS", help="the oldest pending task waited at most this long")
    p.add_argument("--max-dead", type=non_negative(int), metavar="N", help="at most N dead letters per queue")
    p.add_argument("--min-workers", type=non_negative(int), metavar="N", help="at least N live workers per queue")
    p.add_argument("--queue", action="append", dest="health_queues", metavar="Q", help="check only this queue (repeatable)")


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    """Print the verdict; raises SystemExit with the exit code unless every threshold holds."""
    queues = opts.get("health_queues") or list(ins.queues)
    for q in queues:
        ins.keys(q)  # UnknownQueue -> CommandError
    over = {name: opts.get(name) for name in ("max_pending", "max_age", "max_dead", "min_workers")}
    params: dict[str, Any] = settings.TASKS[ins.options.alias]
    health = params.get("OPTIONS", {}).get("HEALTH")
    figures = [f for f in ins.figures() if f.queue in queues]  # Redis unreachable: exit 3 (redisq.py)
    lines: list[str] = []
    data: dict[str, Any] = {}
    for f in figures:
        t: Thresholds = configured(health, f.queue).merged(**over)
        found = breaches(f, t)
        lines += found
        data[f.queue] = {"pending": f.pending, "running": f.running, "held": f.held, "oldest_pending_age": f.oldest_pending_age,
                         "dead": f.dead, "workers": f.workers,
                         "paused": f.paused, "thresholds": {k: v for k, v in asdict(t).items() if v is not None}, "breaches": found}
    try:  # events: a subscription lagging past its topic's HEALTH_MAX_LAG, or one that lost events (ops/topics.py)
        subs = TopicOps(ins.options).rows() if not opts.get("health_queues") else []
    except (RedisError, OSError):
        subs = []
    lines += [b for s in subs for b in s.breaches]
    subscriptions = {s.name: {"topic": s.topic, "lag": s.lag, "pending": s.pending, "dropped": s.dropped,
                              "regrouped": s.regrouped, "health_max_lag": s.health_max_lag, "breaches": s.breaches}
                     for s in subs}
    # a paused queue is an operator's choice, not a failure: said, never breached by itself
    notes = [f"note: queue {f.queue} ({f.alias}) is paused" + (f" since {f.paused_at:%Y-%m-%dT%H:%M:%SZ}" if f.paused_at else "")
             + (f" by {f.paused_by}" if f.paused_by else "") + ": its tasks wait until it is resumed" for f in figures if f.paused]
    notes += [n for s in subs for n in s.notes]  # a deleted consumer group recreated: said, not a breach (nothing lost)
    status = "breached" if lines else "ok"
    emit(command, opts, {"status": status, "breaches": lines, "notes": notes, "queues": data, "subscriptions": subscriptions},
         (lines or [f"ok: {len(figures)} queue(s) within their thresholds"]) + notes)
    if lines:
        raise SystemExit(BREACHED)


def emit(command: BaseCommand, opts: dict[str, Any], data: dict[str, Any], lines: list[str]) -> None:
    command.stdout.write(json.dumps(data, indent=2) if opts.get("json") else "\n".join(map(printable, lines)))  # one line each
