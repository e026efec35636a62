"""Partitioned queues: one logical queue spread over several hash tags.

``QUEUE_OPTIONS["events"]["PARTITIONS"] = 8`` stores the logical queue
``events`` as 8 physical queues: ``events`` (partition 0, today's keys, so
adding partitions later moves nothing) and ``events~1`` .. ``events~7``, each
with its own hash tag (``{events~3}``) and so, on a Redis Cluster, possibly on
its own master. ``~`` cannot appear in a queue name (``options.NAME_RE``), so a
physical name never collides with a configured queue.

This module is the one place that maps logical to physical names and picks
a partition for a new task. Every script, and every ``Broker`` step, works on
one physical queue as it works on a queue today: a delayed task, a retry, a
reaped task and a replayed dead letter stay in their partition. A queue of
one partition (the default) is its own single physical queue: no other key,
no other code path.

Order is FIFO per partition only. A task with an idempotency key always
lands in the same partition (crc32 of the key, mod PARTITIONS), so the key's
guard still dedups; other tasks go round-robin, per process.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator

SEP = "~"
"""Between a logical queue name and a partition number: not allowed in queue names (options.NAME_RE)."""
MAX_PARTITIONS = 1024
"""A worker runs one fetch thread per partition it serves and an admin page reads every partition of
a queue in one pipeline: a cap that keeps both bounded, far above a cluster's count of masters."""

_counters: dict[str, Iterator[int]] = {}


def physical(queue: str, partitions: int) -> list[str]:
    """The physical queues of logical ``queue``, partition 0 first."""
    if partitions <= 1:
        return [queue]
    return [queue, *(f"{queue}{SEP}{i}" for i in range(1, partitions))]


def logical(name: str) -> str:
    """The logical queue a physical queue name belongs to (the name itself for partition 0)."""
    return name.partition(SEP)[0] if SEP in name else name


def index(name: str) -> int:
    """The partition number of a physical queue name."""
    _, sep, i = name.partition(SEP)
    return int(i) if sep and i.isdigit() else 0


def by_key(queue: str, partitions: int, key: str) -> str:
    """The partition of a task with idempotency key ``key``: the same for the same key, always."""
    i = zlib.crc32(key.encode("utf-8", "surrogateescape")) % partitions
    return f"{queue}{SEP}{i}" if i else queue


def next_partition(queue: str, partitions: int) -> str:
    """Round-robin, per process (``next`` on an ``itertools.count`` is atomic under the GIL)."""
    counter = _counters.get(queue)
    if counter is None:
        counter = _counters.setdefault(queue, itertools.count())
    i = next(counter) % partitions
    return f"{queue}{SEP}{i}" if i else queue


def pick(queue: str, partitions: int, key: str = "") -> str:
    """The physical queue of a new task of logical ``queue``: by idempotency key if any, else round-robin."""
    if partitions <= 1:
        return queue
    return by_key(queue, partitions, key) if key else next_partition(queue, partitions)
