"""Execution pools: where the tasks a worker fetched actually run.

The worker (``worker/worker.py``) fetches, settles, heartbeats and shuts down the
same way whatever the pool; a pool only runs what it is handed. It runs
``lanes`` executor threads, each handing the pool one delivery at a time with
``submit``; the pool reports each outcome through the ``done`` callback, and
the worker settles it.

- ``threads`` (``threads.py``): the task runs on the executor thread itself.
  Cheapest; a time limit or a cancellation is an exception raised in the task.
- ``processes`` (``processes.py``, ``child.py``): each lane owns a child
  process that runs one task at a time. Only the worker talks to Redis; the
  child gets the message and returns the outcome. Time limits are hard (the
  child is killed), a dying child fails only its attempt (``worker_lost``).
- ``asyncio`` (``eventloop.py``): one event loop runs up to ``concurrency``
  tasks at once; ``async def`` tasks run on it, sync ones on a thread.
"""

from __future__ import annotations

from django_redisq.worker.pools.base import POOLS, Pool
from django_redisq.worker.running.runner import Runner

__all__ = ["POOLS", "Pool", "make_pool"]


def make_pool(kind: str, runner: Runner, worker_id: str, concurrency: int, *,
              max_tasks_per_child: int | None = None, max_memory_per_child: int | None = None) -> Pool:
    """The pool named ``kind`` (one of ``POOLS``).

    Each pool's module is imported only when chosen (a light import path): a thread pool never loads the process
    pool's child machinery, nor an event loop's.
    """
    if kind == "threads":
        from django_redisq.worker.pools.threads import ThreadPool  # imported when chosen (a light import path)

        return ThreadPool(runner, worker_id, concurrency)
    if kind == "processes":
        from django_redisq.worker.pools.processes import ProcessPool  # imported when chosen (a light import path)

        return ProcessPool(runner, worker_id, concurrency, max_tasks_per_child=max_tasks_per_child,
                           max_memory_per_child=max_memory_per_child)
    if kind == "asyncio":
        from django_redisq.worker.pools.eventloop import EventLoopPool  # imported when chosen (a light import path)

        return EventLoopPool(runner, worker_id, concurrency)
    raise ValueError(f"unknown pool {kind!r}: choose one of {', '.join(POOLS)}")
