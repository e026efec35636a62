"""The template a process pool's children are forked from: started, set up once, asked to fork, stopped.

``child.py`` is what runs in the template and in a child; this module is the
template as the worker drives it. The template is a new interpreter (``python
-c child.BOOTSTRAP FD PATH...``: it imports from the worker's ``sys.path``,
never from the working directory) given one end of a socket pair, never a
fork of the worker: the worker has threads and open sockets, and a fork of a
threaded process may inherit a lock another thread held, forever. Nor is the
main module imported again (as multiprocessing's spawn would), so any script
can run a process-pool worker.

The template sets up Django once (most of a second) and forks each child on
request, so a child is ready in milliseconds and a pool of N is ready about
as soon as one is. A template that died (killed, out of memory) is started
again when the next child is wanted; its children die with it (the lanes see
them gone and fail their attempts as for any lost child). When a child dies
its end of the pipe closes, so the worker sees it at once; the template
tells how it ended. After the first replacement ``Children`` still keeps one
spare ready ahead.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import subprocess
import sys
import threading
from multiprocessing.connection import Connection, wait
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from django_redisq.worker.pools.child import BOOTSTRAP, ChildConfig, pass_descriptor, template_forked
from django_redisq.worker.pools.handles import Child, Forked, OwnChild

START_TIMEOUT = 120.0
"""Seconds a new template may take to set up Django and import the tasks (a child, forked from it, takes milliseconds)."""
FORK_TIMEOUT = 30.0
"""Seconds the template may take to fork a child and the child to say it is ready."""


class TemplateGone(Exception):
    """The template died before it forked the child asked for."""


def interpreter(bootstrap: str, config: ChildConfig) -> tuple[subprocess.Popen[bytes], Any]:
    """A new interpreter running ``bootstrap`` with the worker's path, given one end of a pipe (the other returned)."""
    ours, theirs = mp.Pipe()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": config.settings_module}
    process = subprocess.Popen(
        [sys.executable, "-c", bootstrap, str(theirs.fileno()), *config.sys_path],
        pass_fds=(theirs.fileno(),), env=env, close_fds=True,
    )
    theirs.close()
    return process, ours


def early_template() -> Template | None:
    """The template forked from this process now, if it has no thread but this one (the whole process: C threads
    count); None where that cannot be known (no ``/proc``) or is not so. ``runworker`` builds its pool before any
    thread or socket exists, so its template is ready at once, Django already set up; it is configured later."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return None
    try:
        if len(os.listdir("/proc/self/task")) != 1:
            return None
    except OSError:
        return None
    ours, theirs = mp.Pipe()
    pid = os.fork()
    if pid == 0:  # the template: never returns
        template_forked(theirs)
    theirs.close()
    return Template(OwnChild(pid), ours, forked=True)


class Template:
    """The process children are forked from, set up once: a fork of the worker made before any thread or socket
    existed (``early_template``), or a fresh interpreter (``fresh``: at a restart, or when the worker had threads)."""

    def __init__(self, process: subprocess.Popen[bytes] | OwnChild, conn: Connection, forked: bool = False) -> None:
        self.process = process
        self.conn = conn
        self.forked = forked
        self.threads = 1  # its threads once set up: above 1, children are started afresh instead of forked
        self.exits: dict[int, int] = {}  # child pid -> exit code, as the template reported them
        self.gone = threading.Event()  # its pipe closed: it died or was stopped
        self._exited = threading.Condition()
        self._replies: queue.Queue[int | None] = queue.Queue()
        self._lock = threading.Lock()  # one request on the pipe at a time
        self._reader: threading.Thread | None = None

    @classmethod
    def fresh(cls, config: ChildConfig) -> Template:
        """A new interpreter (``python -c child.BOOTSTRAP FD PATH...``), given ``config`` (``ready`` waits for it)."""
        if not hasattr(os, "fork"):
            raise ImproperlyConfigured("the process pool needs a POSIX system (it passes a socket to each child)")
        process, ours = interpreter(BOOTSTRAP, config)
        return cls(process, ours).configure(config)

    def configure(self, config: ChildConfig) -> Template:
        try:
            self.conn.send(config)
        except OSError:
            pass  # it is gone: ``ready`` says so
        return self

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return not self.gone.is_set() and self.process.poll() is None

    def ready(self) -> Template:
        """Wait until it has set up; ``ImproperlyConfigured`` with its reason (and traceback) if it could not."""
        detail = f"no answer within {START_TIMEOUT:g} s"
        if wait([self.conn], START_TIMEOUT):
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                msg = ("error", "")
            if msg[0] == "ready":
                self.threads = msg[2] if len(msg) > 2 else 1
                self._reader = threading.Thread(target=self._read, name="redisq-template", daemon=True)
                self._reader.start()
                return self
            detail = msg[1]
        self.kill()
        lines = (detail or "it died while setting up").strip().splitlines()
        raise ImproperlyConfigured(f"a process-pool child could not start: {lines[-1]}" + "".join(f"\n  {x}" for x in lines[:-1]))

    def _read(self) -> None:
        """Its reports, one thread: a child forked (to the request waiting), a child ended (to ``exits``)."""
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                break
            if msg[0] == "exit":
                with self._exited:
                    self.exits[msg[1]] = msg[2]
                    self._exited.notify_all()
            elif msg[0] == "forked":
                self._replies.put(msg[1])
        self.gone.set()
        self._replies.put(None)
        with self._exited:
            self._exited.notify_all()

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._exited:
            self._exited.wait_for(lambda: pid in self.exits or self.gone.is_set(), timeout)
            return self.exits.get(pid)

    def fork(self) -> Child:
        """A new child, forked from the template (not yet known to be ready: ``ready`` waits for it)."""
        ours, theirs = mp.Pipe()
        try:
            with self._lock:
                if self.gone.is_set():
                    raise TemplateGone
                try:
                    self.conn.send(("fork",))
                    pass_descriptor(self.conn, theirs.fileno())
                except OSError as exc:
                    raise TemplateGone from exc
                try:
                    pid = self._replies.get(timeout=FORK_TIMEOUT)
                except queue.Empty:
                    pid = None
                if pid is None:
                    raise TemplateGone
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return Child(Forked(self, pid), ours)

    def stop(self, timeout: float = 5.0) -> None:
        """Ask it to leave (its children, which should be gone by now, die with it); kill it after ``timeout``."""
        with self._lock:
            try:
                self.conn.send(None)
            except OSError:
                pass
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.conn.close()
        self.gone.set()
