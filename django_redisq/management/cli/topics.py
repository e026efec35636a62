"""``manage.py redisq topics``: each subscription's lag, pending and drops; ``topics rewind`` replays one.

    redisq topics [--json]
    redisq topics rewind SUBSCRIPTION --to ID|TIME|earliest [--json]

Exit codes (out.py): 0 ok; 1 a failure the command reports (an unknown
subscription, a group not created yet); 2 a usage error (argparse, a bad
``--to``); 3 Redis unreachable (redisq.py says so for every subcommand).
Errors are one line (CommandError), never a traceback.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from django_redisq.management.cli.out import FAILED, table, usage
from django_redisq.management.cli.text import printable
from django_redisq.ops.inspector import Inspector
from django_redisq.ops.topics import BadRewindTarget, TopicOps, UnknownSubscription, at


def add_parser(sub: Any) -> None:
    p = sub.add_parser("topics", help="events: each subscription's lag, pending, oldest pending age, last delivered; rewind one")
    p.add_argument("--json", action="store_true", help="print JSON")
    control = p.add_subparsers(dest="topics_command")
    rw = control.add_parser("rewind", help="deliver a subscription's events again from an entry id or a time (new tasks)")
    rw.add_argument("subscription", help="the subscription's name (OPTIONS['SUBSCRIPTIONS'])")
    rw.add_argument("--to", required=True, metavar="ID|TIME", help="an entry id (<ms>-<seq>), an ISO 8601 time, or 'earliest'")
    rw.add_argument("--json", action="store_true", dest="rewind_json", help="print JSON")  # its own dest: a subparser's
    # default would otherwise overwrite `topics --json rewind ...`


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    ops = TopicOps(ins.options)
    try:
        if opts.get("topics_command") == "rewind":
            rewind(command, ops, opts)
        else:
            listing(command, ops, opts)
    except BadRewindTarget as exc:
        raise usage(str(exc)) from None
    except UnknownSubscription as exc:
        raise CommandError(str(exc), returncode=FAILED) from None


def listing(command: BaseCommand, ops: TopicOps, opts: dict[str, Any]) -> None:
    rows = ops.rows()
    if opts.get("json"):
        command.stdout.write(json.dumps([asdict(r) for r in rows], indent=2))
        return
    if not rows:
        command.stdout.write(f"no subscriptions in TASKS[{ops.options.alias!r}]['OPTIONS']['SUBSCRIPTIONS']")
        return

    def delivered(r: Any) -> str:
        last = at(r.last_delivered)
        return f"{r.last_delivered} ({last:%Y-%m-%dT%H:%M:%SZ})" if last else "-"

    lines = table(["subscription", "topic", "queue", "lag", "pending", "oldest", "gen", "dropped", "regrouped", "last delivered"],
                  [[r.name, r.topic, r.queue, f"{r.lag}{'' if r.lag_exact else '+'}" if r.exists else "no group", r.pending,
                    f"{r.oldest_pending_age:.1f}s" if r.oldest_pending_age is not None else "-", r.generation, r.dropped,
                    r.regrouped, delivered(r)] for r in rows], right=range(3, 9))
    command.stdout.write("\n".join(lines + [n for r in rows for n in r.notes]))


def rewind(command: BaseCommand, ops: TopicOps, opts: dict[str, Any]) -> None:
    generation, target = ops.rewind(opts["subscription"], opts["to"])
    data = {"subscription": opts["subscription"], "set_to": target, "generation": generation}
    command.stdout.write(json.dumps(data) if opts.get("json") or opts.get("rewind_json") else printable(
        f"subscription {opts['subscription']} rewound: entries after {target} are delivered again, as new tasks "
        f"(generation {generation})"))
