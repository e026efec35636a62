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

Each child is a new interpreter (``python -m django_redisq.pools.child``),
never a fork of the worker: the worker has threads and open sockets, and a
fork of a threaded process may inherit a lock another thread held, forever.
Nor is the main module imported again (as multiprocessing's spawn would), so
any script can run a process-pool worker. Each child sets up Django once; the
worker closes its database connections before starting children, so none is
ever shared. The pipe to a child is a socket pair: when the child dies, its
end closes and the lane sees it at once.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from ..broker import Delivery
from ..exceptions import TaskCancelled, TaskTimeout, WorkerLost
from ..outcome import Outcome
from ..task import _registry
from . import Done, Pool
from .child import ChildConfig

logger = logging.getLogger("django_redisq")

HARD_KILL_GRACE = 1.0
"""Seconds a child may take past a task's time limit (to unwind from ``TaskTimeout``) before it is killed."""
START_TIMEOUT = 120.0
"""Seconds a new child may take to set up Django and import the tasks."""
POLL = 0.1
"""Seconds between looks at cancellations while a task runs in a child (a finished task is seen at once)."""


@dataclass(eq=False)
class Child:
    process: subprocess.Popen[bytes]
    conn: Connection
    tasks: int = 0
    rss: int = 0

    def alive(self) -> bool:
        return self.process.poll() is None

    def join(self, timeout: float) -> bool:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True


class Abandoned(Exception):
    """The pool was stopped at once: the running task stays in processing for the reaper."""


def _death(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


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
        self._config: ChildConfig | None = None
        self._spare: Future[Child] | None = None  # started after the first replacement
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="redisq-spawn")
        self._stopping = ThreadPoolExecutor(1, thread_name_prefix="redisq-reap")
        self._stopped = False
        self._gone: dict[int, int] = {}  # lane -> pid of the child killed there, for the log line

    # -- children --------------------------------------------------------

    def start(self) -> None:
        from django.conf import settings
        from django.db import connections

        modules = sorted({t.func.__module__ for t in _registry.values()} - {"__main__"})
        self._config = ChildConfig(self.runner.alias, settings.TASKS, tuple(modules), self.worker_id,
                                   logging.getLogger("django_redisq").getEffectiveLevel(), tuple(sys.path),
                                   os.environ.get("DJANGO_SETTINGS_MODULE", ""))
        connections.close_all()
        launched = [self._launch() for _ in range(self.lanes)]  # set up side by side
        try:
            for lane, child in enumerate(launched):
                self.children[lane] = self._ready(child)
        except BaseException:
            for child in launched:
                self._end(child, kill=True)
            raise
        logger.debug("process pool: %d child(ren) ready: %s", self.lanes, ", ".join(str(c.process.pid) for c in launched))

    def _launch(self) -> Child:
        assert self._config is not None
        if not hasattr(os, "fork"):
            raise ImproperlyConfigured("the process pool needs a POSIX system (it passes a socket to each child)")
        ours, theirs = mp.Pipe()
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": self._config.settings_module}
        process = subprocess.Popen(
            [sys.executable, "-m", "django_redisq.pools.child", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), env=env, close_fds=True,
        )
        theirs.close()
        ours.send(self._config)
        return Child(process, ours)

    def _ready(self, child: Child) -> Child:
        if wait([child.conn], START_TIMEOUT):
            try:
                msg = child.conn.recv()
            except (EOFError, OSError):
                msg = ("error", "")
            if msg[0] == "ready":
                return child
            detail = msg[1]
        else:
            detail = f"no answer within {START_TIMEOUT:g} s"
        self._end(child, kill=True)
        lines = (detail or "it died while setting up").strip().splitlines()
        raise ImproperlyConfigured(f"a process-pool child could not start: {lines[-1]}" + "".join(f"\n  {x}" for x in lines[:-1]))

    def _end(self, child: Child, kill: bool = False) -> None:
        """Stop one child: ask it to leave, kill it if it does not (or at once with ``kill``)."""
        if not kill and child.alive():
            try:
                child.conn.send(None)
            except OSError:
                pass
            child.join(5)
        if child.alive():
            child.process.kill()
        child.join(5)
        child.conn.close()

    def _replace(self, lane: int, why: str) -> Child | None:
        """A new child for ``lane`` (the spare, set up beforehand, if there is one); None once stopping at once.

        A child that cannot start (the code changed under the worker?) is tried
        again with backoff while the lane holds its task: the task stays in the
        worker's list, to be handed back at shutdown, never buried for it.
        """
        recycled = why.startswith("recycled")
        old = self.children[lane]
        if old is not None:
            if recycled:  # it leaves in its own time, the lane goes on with the next child
                self._stopping.submit(self._end, old)
            else:
                self._end(old, kill=True)
        self.children[lane] = None
        for attempt in itertools.count():
            if self._abandon:
                return None
            try:
                child = self._take_spare()
                break
            except ImproperlyConfigured as exc:
                logger.error("process pool: %s; trying again", exc)
                time.sleep(min(30.0, 0.5 * 2**attempt))
        self.children[lane] = child
        self.replaced += 1
        logger.log(logging.INFO if recycled else logging.WARNING, "process pool: child %s %s; child %s replaces it",
                   old.process.pid if old else self._gone.pop(lane, "-"), why, child.process.pid)
        return child

    def _take_spare(self) -> Child:
        """The spare child if one is ready or starting, else a new one; then start the next spare.

        Setting up Django takes a child most of a second: with a spare, a lane
        whose child was recycled, killed or lost runs its next task at once.
        """
        with self._lock:
            spare, self._spare = self._spare, None
        try:
            child = spare.result() if spare is not None else self._ready(self._launch())
        finally:
            with self._lock:
                if self._spare is None and not self._abandon and not self._stopped:
                    self._spare = self._spawner.submit(lambda: self._ready(self._launch()))
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
                why = f"the process running the task (pid {child.process.pid}) {_death(child.process.returncode)}"
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
        if child.alive():
            child.process.kill()
        child.join(5)
        child.conn.close()
        if self.children[lane] is child:
            self.children[lane] = None
            self._gone[lane] = child.process.pid

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
        with self._lock:
            self._abandon = self._abandon or force
            spare, self._spare = self._spare, None
            self._stopped = True
        for lane, child in enumerate(self.children):
            if child is not None:
                self._end(child, kill=force)
                self.children[lane] = None
        if spare is not None:
            try:
                self._end(spare.result(), kill=True)
            except Exception:  # noqa: BLE001 - a spare that never started leaves nothing behind
                pass
        self._spawner.shutdown(wait=False)
        self._stopping.shutdown(wait=True)

    def kill(self) -> None:
        self._abandon = True
        spare = self._spare
        children = [*self.children, spare.result() if spare is not None and spare.done() and not spare.exception() else None]
        for child in children:
            if child is not None and child.alive():
                child.process.kill()
