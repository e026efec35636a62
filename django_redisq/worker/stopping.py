"""A worker's stop, said honestly and ending with nothing held: the line it logs, and the hand-back at its end.

A stop used to say "finishing running tasks, then exiting" and then nothing for
SHUTDOWN_GRACE; what was still running at its end stayed held by the stopped
worker until another one reaped it (a ``--burst`` worker did not). Now the line
names the tasks and the deadline (and, for a signal, how to stop at once), and
what still runs when the worker leaves goes back to pending, its delivery
counted (release.lua's "ran" form), so too_many_deliveries still applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django_redisq.store.broker import Broker
from django_redisq.store.steps.replies import Delivery

SHOWN = 5
"""Running tasks named in the line; the rest are counted."""


def named(running: Sequence[Delivery], shown: int | None = SHOWN) -> str:
    """The tasks by name and id, the first ``shown`` of them (None: all), the rest counted."""
    text = ", ".join(f"{d.task or '?'} id={d.id}" for d in running[:shown]) or "-"
    if shown is not None and len(running) > shown:
        text += f" and {len(running) - shown} more"
    return text


def stop_line(running: Sequence[Delivery], grace: float, why: str) -> str:
    """What a stop waits for: the ``running`` tasks by name and id, for at most ``grace`` seconds; ``why``: a signal's
    name (then a second one exits now) or what else stopped the worker ("reloading")."""
    if not running:
        return f"{why}: no task running; exiting"
    line = (f"{why}: waiting up to {grace:g} s (SHUTDOWN_GRACE) for {len(running)} running task(s) to finish: "
            f"{named(running)}; then exiting.")
    if why.startswith("SIG"):
        again = "Ctrl-C again" if why == "SIGINT" else f"a second {why}"
        line += f" {again} exits now; unfinished tasks go back to pending, their attempt counted"
    return line


def hand_back(broker: Broker, worker_id: str, by_queue: Mapping[str, Sequence[str]], ran: bool = False) -> int:
    """Put the tasks of ``by_queue`` back in their queues' pending lists; ``ran``: they were running (their delivery
    stays counted). How many left this worker's lists."""
    return sum(broker.release(q, worker_id, list(ids), ran=ran) for q, ids in by_queue.items() if ids)
