"""The worker's side of process-pool children: start one, wait until it is ready, stop it; keep a spare.

``child.py`` is what runs in a child; this module is how the worker starts
and ends them. A child is a new interpreter (``python -c child.BOOTSTRAP FD
PATH...``: it imports from the worker's ``sys.path``, never from the working
directory) given one end of a socket pair, never a fork
of the worker: the worker has threads and open sockets, and a fork of a
threaded process may inherit a lock another thread held, forever. Nor is the
main module imported again (as multiprocessing's spawn would), so any script
can run a process-pool worker. When a child dies its end of the pipe closes,
so the worker sees it at once.

Setting up Django takes a child most of a second, so after the first
replacement ``Children`` keeps one spare set up ahead.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait

from django.core.exceptions import ImproperlyConfigured

from django_redisq.task import _registry
from django_redisq.worker.pools.child import BOOTSTRAP, ChildConfig

logger = logging.getLogger("django_redisq")

START_TIMEOUT = 120.0
"""Seconds a new child may take to set up Django and import the tasks."""


@dataclass(eq=False)
class Child:
    process: subprocess.Popen[bytes]
    conn: Connection
    tasks: int = 0  # run so far
    rss: int = 0  # resident bytes after its last task

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def join(self, timeout: float) -> bool:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> None:
        if self.alive():
            self.process.kill()
        self.join(5)
        self.conn.close()

    def end(self) -> None:
        """Ask it to leave after its task; kill it if it has not within 5 s."""
        if self.alive():
            try:
                self.conn.send(None)
            except OSError:
                pass
            self.join(5)
        self.kill()

    def death(self) -> str:
        """How it ended, for the attempt's error: 'was killed by SIGKILL', 'exited with status 1'."""
        code = self.process.returncode
        if code is not None and code < 0:
            try:
                return f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"was killed by signal {-code}"
        return f"exited with status {code}"


def config_for(alias: str, worker_id: str) -> ChildConfig:
    """What a child needs to run exactly what this worker would: its task settings, task modules and import path."""
    from django.conf import settings

    modules = sorted({t.func.__module__ for t in _registry.values()} - {"__main__"})
    path = tuple(p for p in sys.path if isinstance(p, str))  # the import system skips any other entry
    return ChildConfig(alias, settings.TASKS, tuple(modules), worker_id, logging.getLogger("django_redisq").getEffectiveLevel(),
                       path, os.environ.get("DJANGO_SETTINGS_MODULE", ""))


def launch(config: ChildConfig) -> Child:
    """Start a child; it sets up in the background (``ready`` waits for it)."""
    if not hasattr(os, "fork"):
        raise ImproperlyConfigured("the process pool needs a POSIX system (it passes a socket to each child)")
    ours, theirs = mp.Pipe()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": config.settings_module}
    process = subprocess.Popen(
        [sys.executable, "-c", BOOTSTRAP, str(theirs.fileno()), *config.sys_path],
        pass_fds=(theirs.fileno(),), env=env, close_fds=True,
    )
    theirs.close()
    ours.send(config)
    return Child(process, ours)


def ready(child: Child) -> Child:
    """Wait until ``child`` has set up; ``ImproperlyConfigured`` with its reason (and traceback) if it could not."""
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
    child.kill()
    lines = (detail or "it died while setting up").strip().splitlines()
    raise ImproperlyConfigured(f"a process-pool child could not start: {lines[-1]}" + "".join(f"\n  {x}" for x in lines[:-1]))


class Children:
    """Starts children for one pool, keeping a spare after the first replacement; ends the ones it is given back."""

    def __init__(self, config: ChildConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._spare: Future[Child] | None = None
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="redisq-spawn")
        self._ender = ThreadPoolExecutor(1, thread_name_prefix="redisq-reap")
        self._closed = False

    def start(self, n: int) -> list[Child]:
        """``n`` children, set up side by side; none is left running if one cannot start."""
        launched = [launch(self.config) for _ in range(n)]
        try:
            return [ready(c) for c in launched]
        except BaseException:
            for c in launched:
                c.kill()
            raise

    def take(self) -> Child:
        """The spare if one is ready or starting, else a new child; then a new spare is started."""
        with self._lock:
            spare, self._spare = self._spare, None
        try:
            return spare.result() if spare is not None else ready(launch(self.config))
        finally:
            with self._lock:
                if self._spare is None and not self._closed:
                    self._spare = self._spawner.submit(lambda: ready(launch(self.config)))

    @property
    def spare(self) -> Future[Child] | None:
        return self._spare

    def retire(self, child: Child) -> None:
        """A recycled child leaves after its task in its own time; the lane goes on with the next."""
        self._ender.submit(child.end)

    def close(self, kill: bool = False) -> None:
        """No more children: the spare is stopped; with ``kill``, retiring ones are not waited for."""
        with self._lock:
            self._closed = True
            spare, self._spare = self._spare, None
        if spare is not None:
            try:
                spare.result(START_TIMEOUT).kill()
            except Exception:  # noqa: BLE001 - a spare that never started leaves nothing behind
                pass
        self._spawner.shutdown(wait=False)
        self._ender.shutdown(wait=not kill)

    def kill_spare(self) -> None:
        spare = self._spare
        if spare is not None and spare.done() and spare.exception() is None:
            child = spare.result()
            if child.alive():
                child.process.kill()
