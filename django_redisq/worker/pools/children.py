"""The worker's side of process-pool children: the template they are forked from, start, wait until ready, stop.

``child.py`` is what runs in the template and in a child; this module is how
the worker starts and ends them. The template is a new interpreter (``python
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

import logging
import multiprocessing as mp
import os
import queue
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

from django_redisq.task import _registry
from django_redisq.worker.pools.child import BOOTSTRAP, CHILD_BOOTSTRAP, ChildConfig, pass_descriptor

logger = logging.getLogger("django_redisq")

START_TIMEOUT = 120.0
"""Seconds a new template may take to set up Django and import the tasks (a child, forked from it, takes milliseconds)."""
FORK_TIMEOUT = 30.0
"""Seconds the template may take to fork a child and the child to say it is ready."""


class TemplateGone(Exception):
    """The template died before it forked the child asked for."""


class Forked:
    """A child forked by the template, seen from the worker as ``subprocess.Popen`` shows a child of its own.

    The template is its parent and reaps it; its exit code comes from the template's report
    (``Template.exits``). Once the template is gone, a child no longer found is dead (it dies with the
    template) and counts as killed by SIGKILL.
    """

    def __init__(self, template: Template, pid: int) -> None:
        self.template = template
        self.pid = pid

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def poll(self) -> int | None:
        code = self.template.exits.get(self.pid)
        if code is not None:
            return code
        if self.template.gone.is_set():
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return -signal.SIGKILL
            except PermissionError:
                pass
        return None

    def wait(self, timeout: float | None = None) -> int:
        code = self.template.wait_exit(self.pid, timeout)
        if code is None:
            code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(f"child {self.pid}", timeout or 0.0)
        return code

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


class OwnChild:
    """A child this process forked itself, with the part of ``subprocess.Popen``'s interface the template uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL  # reaped elsewhere: gone
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"template {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return code

    def kill(self) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


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
        from django_redisq.worker.pools.child import template_forked

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
        process, ours = _interpreter(BOOTSTRAP, config)
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


@dataclass(eq=False)
class Child:
    process: Forked | subprocess.Popen[bytes]
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


def ready(child: Child) -> Child:
    """Wait until a forked ``child`` says it is ready; ``ImproperlyConfigured`` if it does not."""
    if wait([child.conn], FORK_TIMEOUT):
        try:
            msg = child.conn.recv()
        except (EOFError, OSError):
            msg = ("error", "")
        if msg[0] == "ready":
            return child
    child.kill()
    raise ImproperlyConfigured(f"a process-pool child (pid {child.pid}) forked from the template did not start: {child.death()}")


def _interpreter(bootstrap: str, config: ChildConfig) -> tuple[subprocess.Popen[bytes], Any]:
    """A new interpreter running ``bootstrap`` with the worker's path, given one end of a pipe (the other returned)."""
    ours, theirs = mp.Pipe()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": config.settings_module}
    process = subprocess.Popen(
        [sys.executable, "-c", bootstrap, str(theirs.fileno()), *config.sys_path],
        pass_fds=(theirs.fileno(),), env=env, close_fds=True,
    )
    theirs.close()
    return process, ours


def launch(config: ChildConfig) -> Child:
    """A child started afresh (``python -c child.CHILD_BOOTSTRAP FD PATH...``), not forked; ``ready_afresh`` waits for it."""
    process, ours = _interpreter(CHILD_BOOTSTRAP, config)
    try:
        ours.send(config)
    except OSError:
        pass  # it died at once: ready_afresh says so
    return Child(process, ours)


def ready_afresh(child: Child) -> Child:
    """Wait until a child started afresh has set up Django; ``ImproperlyConfigured`` with its reason if it could not."""
    detail = f"no answer within {START_TIMEOUT:g} s"
    if wait([child.conn], START_TIMEOUT):
        try:
            msg = child.conn.recv()
        except (EOFError, OSError):
            msg = ("error", "")
        if msg[0] == "ready":
            return child
        detail = msg[1]
    child.kill()
    lines = (detail or "it died while setting up").strip().splitlines()
    raise ImproperlyConfigured(f"a process-pool child could not start: {lines[-1]}" + "".join(f"\n  {x}" for x in lines[:-1]))


class Children:
    """Forks children for one pool from its template (started again if it died), keeps a spare, ends the ones it is given back."""

    def __init__(self, config: ChildConfig, early: Template | None = None) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._template_lock = threading.Lock()
        self._template: Template | None = None
        self._early = early  # forked at the pool's construction, configured when first needed
        self._warned = False
        self.templates_started = 0
        self._spare: Future[Child] | None = None
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="redisq-spawn")
        self._ender = ThreadPoolExecutor(1, thread_name_prefix="redisq-reap")
        self._closed = False

    @property
    def template(self) -> Template | None:
        return self._template

    def _live_template(self) -> Template:
        """The template, started (again) if there is none alive; ``ImproperlyConfigured`` if it cannot set up."""
        with self._template_lock:
            old = self._template
            if old is not None and old.alive():
                return old
            if self._closed:
                raise ImproperlyConfigured("the process pool is stopping")
            if old is not None:
                old.kill()
            early, self._early = self._early, None
            self._template = None
            self._template = (early.configure(self.config) if early is not None else Template.fresh(self.config)).ready()
            self.templates_started += 1
            if old is not None:
                logger.warning("process pool: the template (pid %s) %s; template %s replaces it", old.pid,
                               _ended(old.process.returncode), self._template.pid)
            return self._template

    def new(self) -> Child:
        """A child forked from the template and ready; the template is started again once if it was gone."""
        for attempt in range(2):
            template = self._live_template()
            if self._afresh(template):
                return ready_afresh(launch(self.config))
            try:
                return ready(template.fork())
            except TemplateGone:
                template.process.poll()
                if attempt:
                    raise ImproperlyConfigured(f"the process-pool template (pid {template.pid}) died while forking a child") from None
        raise AssertionError("unreachable")

    def _afresh(self, template: Template) -> bool:
        """Whether children must be started afresh: the template has threads (a fork would copy the locks they hold,
        not the threads); said once in the log."""
        if template.threads <= 1:
            return False
        if not self._warned:
            self._warned = True
            logger.warning("process pool: the template has %d threads once Django is set up (started by the settings or a "
                           "task module): children are started afresh, not forked (each sets up Django itself, most of "
                           "a second)", template.threads)
        return True

    def start(self, n: int) -> list[Child]:
        """``n`` children, forked from one template (or started afresh side by side); none is left running if one
        cannot start."""
        started: list[Child] = []
        try:
            if self._afresh(self._live_template()):
                started = [launch(self.config) for _ in range(n)]
                return [ready_afresh(c) for c in started]
            for _ in range(n):
                started.append(self.new())
        except BaseException:
            for c in started:
                c.kill()
            self.close(kill=True)
            raise
        return started

    def take(self) -> Child:
        """The spare if one is ready or starting, else a new child; then a new spare is started."""
        with self._lock:
            spare, self._spare = self._spare, None
        try:
            if spare is not None:
                try:
                    child = spare.result()
                    if child.alive():
                        return child
                    child.kill()  # it died waiting (with its template?): a fresh one
                except ImproperlyConfigured:
                    pass
            return self.new()
        finally:
            with self._lock:
                if self._spare is None and not self._closed:
                    self._spare = self._spawner.submit(self.new)

    @property
    def spare(self) -> Future[Child] | None:
        return self._spare

    def retire(self, child: Child) -> None:
        """A recycled child leaves after its task in its own time; the lane goes on with the next."""
        self._ender.submit(child.end)

    def close(self, kill: bool = False) -> None:
        """No more children: the spare is stopped, then the template; with ``kill``, retiring ones are not waited for."""
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
        with self._template_lock:
            template, self._template = self._template, None
            early, self._early = self._early, None
        if early is not None:
            early.kill()
        if template is not None:
            template.kill() if kill else template.stop()

    def kill_spare(self) -> None:
        spare = self._spare
        if spare is not None and spare.done() and spare.exception() is None:
            child = spare.result()
            if child.alive():
                child.process.kill()

    def kill_template(self) -> None:
        """At once: the template goes (and with it any child still alive)."""
        template = self._template
        if template is not None and template.process.poll() is None:
            template.process.kill()


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return "died" if code is None else f"exited with status {code}"
