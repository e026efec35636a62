"""``manage.py redisq stats``: sizes, throughput, workers and limits of every queue.

    redisq stats [--json]
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from django.core.management.base import BaseCommand

from django_redisq.management.cli.out import emit, table, when
from django_redisq.management.cli.text import printable
from django_redisq.ops.inspector import Inspector


def add_parser(sub: Any) -> None:
    sub.add_parser("stats", help="sizes, throughput and workers of every queue")


def run(command: BaseCommand, ins: Inspector, opts: dict[str, Any]) -> None:
    stats = ins.stats()
    lines = table(["queue", "pending", "sched", "running", "held", "dead", "oldest", "ok/min", "fail/min", "ok/h", "fail/h"],
                  [[s.queue, s.pending, s.scheduled, s.running, s.held, s.dead,
                    "-" if s.oldest_pending_age is None else f"{s.oldest_pending_age:.0f}s",
                    s.processed_minute, s.failed_minute, s.processed_hour, s.failed_hour] for s in stats], right=range(1, 11))
    workers: dict[str, Any] = {}
    for s in stats:
        for w in s.workers:
            seen = workers.get(w.name)
            if seen is None:
                workers[w.name] = replace(w)
            else:  # one worker on several queues: its running and held tasks of each
                seen.holding += w.holding
                seen.running += w.running
    lines.append("")
    if workers:
        lines += table(["worker", "host", "pid", "queues", "pool", "concurrency", "running", "held", "heartbeat"],
                       [[w.name, *_known(w.host, w.pid, ",".join(w.queues), w.pool if w.pid is not None else "",
                                         w.concurrency), w.running, w.held, _heartbeat(w)] for w in workers.values()],
                       right=(2, 5, 6, 7))
    else:
        lines.append("no workers")
    lines += [paused_line(s) for s in stats if s.paused]
    for s in stats:
        lines += [f"limit {s.queue}: {printable(limit.name) or 'the queue (MAX_RUNNING)'} running {limit.running}/{limit.limit}, "
                  f"waiting {limit.waiting}" for limit in s.limits]
        if s.rate_limit:
            lines.append(f"limit {s.queue}: the queue (RATE_LIMIT) {s.rate_limit}")
    data = [{k: v for k, v in asdict(s).items() if k not in ("series", "workers")} | {"series": [
        {"minute": m, "processed": p, "failed": f, "dead": d} for m, p, f, d in s.series],
        "workers": [asdict(w) | {"held": w.held} for w in s.workers]} for s in stats]
    emit(command, opts, data, "\n".join(lines))


def _known(*cells: Any) -> list[Any]:
    """``-`` for what a worker's record does not say (a stopped worker's record is gone before its row is)."""
    return ["-" if c is None or c == "" else c for c in cells]


def _heartbeat(w: Any) -> str:
    ago = f"{w.seen_ago:.1f}s ago"
    if w.pid is None and not w.host:  # its record is gone: it stopped (or its record expired), and is not reaped yet
        return ago + " (stopped: no worker record)"
    return ago + ("" if w.alive else " (silent)")


def pause_state(s: Any) -> str:
    """``paused since <time> by <who>``, or ``active``, for a QueueStats or QueueFigures."""
    if not s.paused:
        return "active"
    return "paused" + (f" since {when(s.paused_at)}" if s.paused_at else "") + (f" by {printable(s.paused_by)}" if s.paused_by else "")


def paused_line(s: Any) -> str:
    return f"queue {s.queue} is PAUSED{pause_state(s)[6:]}: workers start none of its tasks"
