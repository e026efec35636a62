"""reap.lua, the one step that gives a dead worker's tasks back: by the clock (the broker) or by connection (presence).

Both callers share this function, so the step's KEYS, ARGV and the reading of its
reply (``Reaped``) are spelled once.
"""

from __future__ import annotations

from collections.abc import Sequence

from django_redisq.core.options import Options
from django_redisq.store.scripts.runner import ScriptRunner, ms
from django_redisq.store.steps.replies import Reaped


def heartbeat_gap_ms(options: Options) -> int:
    """A heartbeat later than this after the previous one means the worker (or Redis) was away.

    Half of WORKER_TIMEOUT: more than the normal spacing of heartbeats (E016:
    WORKER_TIMEOUT > 2 x HEARTBEAT_INTERVAL), and an outage shorter than it
    cannot make a live worker's last heartbeat older than WORKER_TIMEOUT
    (at most one interval plus the outage).
    """
    return ms(options.worker_timeout / 2)


def reap(runner: ScriptRunner, queue: str, reaper: str, max_workers: int, pairs: Sequence[str] = ()) -> Reaped:
    """reap.lua by the clock (no ``pairs``) or by connection (``pairs``: worker id, the presence entry seen gone)."""
    k = runner.keys(queue)
    out = runner.run(
        "reap",
        keys=[k.workers, k.pending, k.alive, k.dead, k.cancels, k.prioritized, k.prioseq, k.slots, k.blocked, k.presence],
        args=[k.prefix, ms(runner.options.worker_timeout), max_workers, reaper, heartbeat_gap_ms(runner.options), *pairs],
    )
    return Reaped.of(queue, out)
