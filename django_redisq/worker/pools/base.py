"""What every pool is: ``Pool``, the interface the worker drives, and ``Done``, how a pool reports an outcome."""

from __future__ import annotations

from collections.abc import Callable

from django_redisq.store.steps.replies import Delivery
from django_redisq.worker.running.outcome import Outcome
from django_redisq.worker.running.runner import Runner

POOLS = ("threads", "processes", "asyncio")
Done = Callable[[Delivery, Outcome], None]


class Pool:
    """Runs deliveries handed to it by the worker's executor lanes."""

    name = ""
    lanes = 1
    """How many executor threads feed this pool, each one delivery at a time."""
    deferred = False
    """Whether ``submit`` returns before the task has run (its outcome is reported later, from another thread)."""

    def in_flight(self) -> int:
        """Tasks submitted and not yet done, the one reporting its outcome included (only a deferred pool has any)."""
        return 0

    def __init__(self, runner: Runner, worker_id: str, concurrency: int) -> None:
        self.runner = runner
        self.worker_id = worker_id
        self.concurrency = concurrency

    def start(self) -> None:
        """Get ready to run tasks (before the worker fetches its first)."""

    def reserve(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for room for one more task; the lane calls it before it takes a task.

        Taking the task only then keeps the lease check (``Held.begin``) right
        before the task starts. A lane runs one task at a time in the thread and
        process pools, so they always have room.
        """
        return True

    def unreserve(self) -> None:
        """Give back a reservation that was not used (no task to take)."""

    def submit(self, lane: int, d: Delivery, done: Done) -> None:
        """Run ``d`` (a reservation was made); ``done(d, outcome)`` is called exactly once, on any thread,
        unless the pool is stopped at once. The thread and process pools return only once ``d`` has run.
        """
        raise NotImplementedError

    def cancel(self, task_id: str, why: str = "") -> bool:
        """Stop task ``task_id`` if it runs here (its outcome is ``TaskCancelled``); True if it was told."""
        return self.runner.interrupt(task_id, why)

    def wait_idle(self, deadline: float) -> bool:
        """Wait (until ``time.monotonic()`` reaches ``deadline``) for tasks running beyond the lanes; True if none are left."""
        return True

    def stop(self, force: bool = False) -> None:
        """Release what the pool holds: at once with ``force`` (running tasks are abandoned to the reaper)."""

    def kill(self) -> None:
        """The process is about to exit at once: leave nothing running behind it."""
