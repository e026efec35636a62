"""The process pool: each executor lane supervises a child process that runs one task at a time.

For CPU-bound tasks (one GIL per child) and for hard limits: a task stuck in a
C call is stopped by killing its child. The worker process alone talks to
Redis (fetch, heartbeat, settle), so batching and the crash guarantees are
those of the other pools; a child only gets the message and returns the outcome.

- **Time limits are hard.** The child raises ``TaskTimeout`` in the task at
  the limit (as on threads); if it has not answered ``HARD_KILL_GRACE`` seconds
  later, the lane kills it, records a ``TaskTimeout`` for the attempt and
  starts a new child.
- **A child that dies mid-task** (a segfault, the OOM killer, ``kill -9``)
  fails that attempt with ``WorkerLost`` (retried by the task's policy, then
  dead-lettered with reason ``worker_lost``); the lane starts a new child and
  the worker goes on. The parent settles the attempt, not the reaper.
- **Cancelling** a running task kills its child; the attempt is ``TaskCancelled``.
- **Recycling**: a child is replaced after ``max_tasks_per_child`` tasks or once
  its resident memory exceeds ``max_memory_per_child`` bytes after a task.

How children are started, stopped and kept spare is ``children.py``; what a
child does is ``child.py``. Children are forked from a template process that
set up Django once (a fresh interpreter, not a fork of the worker), so a child
is ready in milliseconds; the worker closes its database connections before
starting the template, and the template opens none, so none is ever shared.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from multiprocessing.connection import wait
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from django_redisq.exceptions import TaskCancelled, TaskTimeout, WorkerLost
from django_redisq.store.steps.replies import Delivery
from django_redisq.worker.pools.base import Done, Pool
from django_redisq.worker.pools.children import Child, Children, config_for, early_template
from django_redisq.worker.running.outcome import Outcome

logger = logging.getLogger("django_redisq")

HARD_KILL_GRACE = 1.0
"""Seconds a child may take past a task's time limit (to unwind from ``TaskTimeout``) before it is killed."""
POLL = 0.1
"""Seconds between looks at cancellations while a task runs in a child (a finished task is seen at once)."""


class Abandoned(Exception):
    """The pool was stopped at once: the running task stays in processing for the reaper."""


class ProcessPool(Pool):
    name = "processes"

    def __init__(self, runner: Any, worker_id: str, concurrency: int, *,
                 max_tasks_per_child: int | None = None, max_memory_per_child: int | None = None) -> None:
        super().__init__(runner, worker_id, concurrency)
        self.lanes = concurrency
        self.max_tasks = max_tasks_per_child
        self.max_memory = max_memory_per_child
        self.children: list[Child | None] = [None] * concurrency
        self.replaced = 0  # children started after the first ones (lost, killed or recycled)
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}  # task id -> lane
        self._cancelled: dict[str, str] = {}  # task id -> who cancelled it
        self._abandon = False
        self._gone: dict[int, int] = {}  # lane -> pid of the child killed there, for the log line
        self._spawn: Children | None = None
        self._early = early_template()  # now, while the worker may still have no thread: ready at once

    # -- children --------------------------------------------------------

    @property
    def _spare(self) -> Any:
        return self._spawn.spare if self._spawn is not None else None

    def start(self) -> None:
        early, self._early = self._early, None
        self._spawn = Children(config_for(self.runner.alias, self.worker_id), early)
        connections.close_all()
        self.children[:] = self._spawn.start(self.lanes)
        logger.debug("process pool: %d child(ren) ready: %s", self.lanes, ", ".join(str(c.pid) for c in self.children if c))

    def _replace(self, lane: int, why: str) -> Child | None:
        """A new child for ``lane`` (the spare, set up beforehand, if there is one); None once stopping at once.

        A child that cannot start (the code changed under the worker?) is tried
        again with backoff while the lane holds its task: the task stays in the
        worker's list, to be handed back at shutdown, never buried for it.
        """
        assert self._spawn is not None
        recycled = why.startswith("recycled")
        old = self.children[lane]
        if old is not None:
            if recycled:
                self._spawn.retire(old)
            else:
                old.kill()
        self.children[lane] = None
        for attempt in itertools.count():
            if self._abandon:
                return None
            try:
                child = self._spawn.take()
                break
            except ImproperlyConfigured as exc:
                logger.error("process pool: %s; trying again", exc)
                time.sleep(min(30.0, 0.5 * 2**attempt))
        self.children[lane] = child
        self.replaced += 1
        logger.log(logging.INFO if recycled else logging.WARNING, "process pool: child %s %s; child %s replaces it",
                   old.pid if old else self._gone.pop(lane, "-"), why, child.pid)
        return child

    # -- running ---------------------------------------------------------

    def submit(self, lane: int, d: Delivery, done: Done) -> None:
        child = self.children[lane]
        if child is None or not child.alive():
            child = self._replace(lane, "was gone")
        if child is None:
            return  # stopping at once: the task stays for the reaper
        with self._lock:
            self._running[d.id] = lane
        try:
            outcome = self._exchange(lane, child, d)
        except Abandoned:
            return
        finally:
            with self._lock:
                self._running.pop(d.id, None)
                self._cancelled.pop(d.id, None)
        done(d, outcome)
        child = self.children[lane]
        if child is None:
            self._replace(lane, "was killed")
        elif self.max_tasks and child.tasks >= self.max_tasks:
            self._replace(lane, f"recycled after {child.tasks} task(s)")
        elif self.max_memory and child.rss > self.max_memory:
            self._replace(lane, f"recycled at {child.rss / 2**20:.0f} MiB resident (limit {self.max_memory / 2**20:.0f} MiB)")

    def _exchange(self, lane: int, child: Child, d: Delivery) -> Outcome:
        """Hand ``d`` to the child and wait for its outcome, killing the child at a hard limit or a cancel."""
        limit = self.runner.limit_for(d)
        begun = time.monotonic()
        deadline = begun + limit + HARD_KILL_GRACE if limit else float("inf")
        try:
            child.conn.send(d)
        except OSError:
            pass  # it died between tasks: seen below as a death
        while True:
            now = time.monotonic()
            ready = wait([child.conn], min(POLL, max(0.0, deadline - now)))
            if self._abandon:
                raise Abandoned
            if child.conn in ready:
                try:
                    msg = child.conn.recv()
                except (EOFError, OSError):
                    msg = ("eof",)
                if msg[0] == "done":
                    child.tasks += 1
                    child.rss = msg[2]
                    return msg[1]  # type: ignore[no-any-return]
            ran = time.monotonic() - begun
            if d.id in self._cancelled:
                self._kill(lane, child)
                who = self._cancelled[d.id]
                gone = TaskCancelled(f"cancelled{' by ' + who if who else ''} while running (its child process was killed)")
                return self.runner.lost(d, self.worker_id, gone, ran)
            if child.conn in ready or not child.alive():
                child.join(1)
                self._kill(lane, child)
                why = f"the process running the task (pid {child.pid}) {child.death()}"
                logger.warning("task id=%s: %s; the attempt failed, a new child takes over", d.id, why)
                return self.runner.lost(d, self.worker_id, WorkerLost(why), ran)
            if time.monotonic() >= deadline:
                self._kill(lane, child)
                logger.warning("task id=%s ran past its time limit of %g s and did not stop: its child was killed", d.id, limit)
                late = TaskTimeout(f"exceeded its time limit of {limit:g} s and did not stop within {HARD_KILL_GRACE:g} s: "
                                   f"its child process was killed (ran {ran:.3g} s)")
                late.limit = limit
                return self.runner.lost(d, self.worker_id, late, ran)

    def _kill(self, lane: int, child: Child) -> None:
        child.kill()
        if self.children[lane] is child:
            self.children[lane] = None
            self._gone[lane] = child.pid

    # -- control ---------------------------------------------------------

    def cancel(self, task_id: str, why: str = "") -> bool:
        with self._lock:
            lane = self._running.get(task_id)
            if lane is None:
                return False
            self._cancelled[task_id] = why
            child = self.children[lane]
        if child is not None and child.alive():
            child.process.kill()
        return True

    def stop(self, force: bool = False) -> None:
        self._abandon = self._abandon or force
        if self._early is not None:  # never started
            self._early.kill()
            self._early = None
        for lane, child in enumerate(self.children):
            if child is not None:
                child.kill() if force else child.end()
                self.children[lane] = None
        if self._spawn is not None:
            self._spawn.close(kill=force)

    def kill(self) -> None:
        self._abandon = True
        for child in self.children:
            if child is not None and child.alive():
                child.process.kill()
        if self._spawn is not None:
            self._spawn.kill_spare()
            self._spawn.kill_template()
