"""The thread pool: each executor lane runs its task itself (the default).

The cheapest way to run a task: no hand-off at all. The limits are those of
threads in Python: a CPU-bound task holds the GIL; a time limit or a
cancellation is an exception raised in the task when it next runs Python
bytecode, so a blocking C call (a socket read without a timeout) is only
interrupted when it returns.
"""

from __future__ import annotations

from django_redisq.store.steps.replies import Delivery
from django_redisq.worker.pools.base import Done, Pool


class ThreadPool(Pool):
    name = "threads"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lanes = self.concurrency

    def submit(self, lane: int, d: Delivery, done: Done) -> None:
        done(d, self.runner.run(d, self.worker_id))
