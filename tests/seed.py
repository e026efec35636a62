"""Seed dead letters fast, through the real path: enqueue.lua, fetch.lua, bury.lua.

Used by the admin/inspect/command tests and by ``bench/admin_scale.py``. The
bury calls are pipelined through the broker's registered script, so 100,000
dead letters take seconds, and every field is written by the engine itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.utils.crypto import get_random_string

from django_redisq.store.broker import Broker
from django_redisq.store.steps.replies import NewTask

SEED_WORKER = "seed-worker"

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/django_redisq/runner.py", line 123, in run\n'
    "    value = task.call(*message.args, **message.kwargs)\n"
    '  File "/srv/app/shop/tasks.py", line 42, in {name}\n'
    "    raise {exc}({msg!r})\n"
    "{exc}: {msg}\n"
)


def message(task: str, queue: str, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> str:
    return json.dumps({"v": 1, "task": task, "args": list(args), "kwargs": kwargs or {}, "queue": queue,
                       "backend": "default", "priority": 0}, separators=(",", ":"))


def default_row(i: int) -> tuple[str, str, str]:
    """(task path, exception path, error text) of the i-th seeded dead letter."""
    tasks = ("shop.tasks.send_receipt", "shop.tasks.charge_card", "shop.tasks.sync_stock", "shop.tasks.resize_image")
    excs = ("builtins.ValueError", "builtins.KeyError", "requests.exceptions.Timeout", "builtins.RuntimeError")
    return tasks[i % 4], excs[(i // 4) % 4], f"order {i} could not be processed"


def seed_dead(
    broker: Broker,
    queue: str,
    n: int,
    row: Callable[[int], tuple[str, str, str]] = default_row,
    batch: int = 1000,
    start: int = 0,
) -> list[str]:
    """Make ``n`` dead letters in ``queue``; returns their ids, oldest first."""
    k = broker.keys(queue)
    o = broker.options.for_queue(queue)
    ids: list[str] = []
    for lo in range(start, start + n, batch):
        rows = [(i, *row(i)) for i in range(lo, min(lo + batch, start + n))]
        items = [NewTask(get_random_string(24), message(task, queue, [i], {"note": f"seed {i}"}), task, 0, "") for i, task, _, _ in rows]
        broker.enqueue(queue, items)
        broker.heartbeat([queue], SEED_WORKER, {})
        got = broker.fetch(queue, SEED_WORKER, len(items))
        assert len(got) == len(items), "seed_dead needs an otherwise empty pending list"
        pipe = broker.client.pipeline(transaction=False)
        for (_i, task, exc, msg), d in zip(rows, got, strict=False):
            short = exc.rsplit(".", 1)[-1]
            error = {"exc": exc, "msg": msg, "tb": TRACEBACK.format(name=task.rsplit(".", 1)[-1], exc=short, msg=msg),
                     "at": int(time.time() * 1000)}
            broker.scripts.run("bury", keys=[k.processing(SEED_WORKER), k.dead, k.task(d.id), k.status(d.id), k.cancels],
                               args=[k.prefix, d.id, json.dumps(error), "failed", int(o.dead_letter_ttl * 1000),
                                     o.dead_letter_max, SEED_WORKER, 1, msg, exc], pipe=pipe)
            ids.append(d.id)
        pipe.execute()
    return ids
