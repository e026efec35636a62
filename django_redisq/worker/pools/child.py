"""The process pool's template and children: set up Django once, then fork a child per request.

The template is a new interpreter the worker starts (``python -c BOOTSTRAP FD
PATH...``), given one end of a socket pair and nothing else of the worker's:
no thread, no socket, no open file. It sets up Django, imports the modules
that define the worker's tasks and builds a ``Runner``, once; then, on each
request, it forks a child from that state, so a child is ready in
milliseconds instead of the second a fresh interpreter takes to set up
Django. The template never runs a task or opens a connection itself, so a
fork of it shares no socket; it tells the worker how many threads it has
once set up, and if settings or task modules started one (a fork would copy
the locks it holds, not the thread), the worker starts each child afresh
instead (``CHILD_BOOTSTRAP``: set up Django itself, as a template does).

It reaps its children and tells the worker how each ended (``("exit", pid,
code)``, a ``Popen.returncode``). It ignores SIGINT and SIGTERM (the worker
decides when it stops: a terminal's Ctrl-C reaches the whole process group)
and dies with the worker; each child dies with the template (both by
``PR_SET_PDEATHSIG``), so a killed worker leaves no process behind.

A child never talks to Redis about tasks: it receives a ``Delivery`` on its
pipe (the worker's end of a socket pair, passed to the template with the
request) and sends back ``("done", outcome, rss_bytes)`` once it has run (the
worker works out the time limit itself, so a task costs one message each
way). It runs with the worker's task settings (``TASKS``, even when they were
changed at run time), so it runs exactly what the worker would.

The template imports from exactly the worker's ``sys.path``. ``python -m``
would put the working directory first, so a ``django_redisq/`` or ``django/``
planted where the worker was started from would run in every child (the
worker's own path is the one its user chose). ``BOOTSTRAP`` replaces
``sys.path`` by the worker's, given on the command line, before it imports
anything, then calls ``template(FD)``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import signal
import socket
import sys
import threading
import traceback
from dataclasses import dataclass
from importlib import import_module
from multiprocessing.connection import Connection, wait
from typing import Any

from django.db import connections

PR_SET_PDEATHSIG = 1

CHILD_BOOTSTRAP = ("import sys; sys.path[:] = sys.argv[2:]; del sys.argv[2:]; "
                   "from django_redisq.worker.pools.child import serve; serve(int(sys.argv[1]))")
"""A child started afresh, not forked (when the template has threads): set up Django itself, then run tasks."""

BOOTSTRAP = ("import sys; sys.path[:] = sys.argv[2:]; del sys.argv[2:]; "
             "from django_redisq.worker.pools.child import template; template(int(sys.argv[1]))")
"""The template's whole program: ``sys`` is built in, so nothing is imported before the path is the worker's.
It names this module, so ``pgrep -f django_redisq.worker.pools.child`` finds the template and its children
(a fork keeps its parent's command line)."""


@dataclass(frozen=True)
class ChildConfig:
    alias: str
    tasks: dict[str, Any]  # the worker's settings.TASKS
    modules: tuple[str, ...]  # where the worker's registered tasks are defined
    worker_id: str
    log_level: int
    sys_path: tuple[str, ...]  # the worker's: the child's whole import path (see BOOTSTRAP)
    settings_module: str


def rss_bytes() -> int:
    """The resident set size of this process now (peak size where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def _die_with_parent() -> None:
    """On Linux, the kernel kills this child when the worker dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


def _setup(config: ChildConfig) -> Any:
    import django  # in the child: Django is set up here, before anything that reads settings is imported
    from django.apps import apps  # (as above)
    from django.conf import settings  # (as above)

    if not apps.ready:
        django.setup()
    settings.TASKS = config.tasks
    for module in config.modules:
        import_module(module)
    from django_redisq.settings import discovery  # after the tasks modules above: it reads what they registered

    discovery.load(discovery.imports_of(config.tasks.get(config.alias)))
    log = logging.getLogger("django_redisq")
    log.setLevel(config.log_level)
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [child %(process)d] %(message)s"))
        log.addHandler(handler)
    # after django.setup() above: these read settings and the app registry at import
    from django_redisq.settings.read import get_options
    from django_redisq.worker.running.runner import Runner  # (as above)

    return Runner(get_options(config.alias), config.alias)


def pass_descriptor(conn: Connection, fd: int) -> None:
    """Send ``fd`` over ``conn`` (SCM_RIGHTS, one byte of data). Not ``multiprocessing.reduction.send_handle``: on
    macOS that waits for an acknowledgement byte on the same pipe, which the worker's reader thread would take."""
    with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as s:
        socket.send_fds(s, [b"F"], [fd])


def take_descriptor(conn: Connection) -> int:
    """The descriptor ``pass_descriptor`` sent on ``conn``."""
    with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as s:
        _, fds, _, _ = socket.recv_fds(s, 1, 1)
    if not fds:
        raise EOFError("no descriptor came with the fork request")
    return fds[0]


def thread_count() -> int:
    """Threads of this process, C threads included where ``/proc`` says (else Python's own)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def serve(fd: int) -> None:
    """A child started afresh (``CHILD_BOOTSTRAP``): ``fd`` is its end of the worker's pipe; the config comes first."""
    conn = Connection(fd)
    config: ChildConfig = conn.recv()
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        runner = _setup(config)
    except BaseException:  # noqa: BLE001 - the worker reports it and stops
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
    run_tasks(conn, config, runner)


def run_tasks(conn: Connection, config: ChildConfig, runner: Any) -> None:
    """A child's life once ready: run deliveries until told to stop or the pipe closes."""
    while True:
        try:
            d = conn.recv()
        except (EOFError, OSError):
            return
        if d is None:
            return
        try:
            outcome = runner.run(d, config.worker_id)
        except BaseException as exc:  # noqa: BLE001 - as on a thread: the task is buried, the child goes on
            from django_redisq.worker.running.outcome import DEAD, Outcome, error_dict  # set up by now (see _setup)

            outcome = Outcome(DEAD, error=error_dict(exc), reason="worker_error")
        conn.send(("done", outcome, rss_bytes()))


def exit_code(status: int) -> int:
    """A ``waitpid`` status as ``Popen.returncode`` gives it: the exit status, or minus the signal that killed it."""
    return os.waitstatus_to_exitcode(status)


def _reap(control: Connection) -> None:
    """Tell the worker how each child that ended did (``("exit", pid, code)``)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        try:
            control.send(("exit", pid, exit_code(status)))
        except OSError:
            return


def _forked(control: Connection, fd: int, wakeup: tuple[int, int], config: ChildConfig, runner: Any) -> None:
    """In a child just forked from the template: drop what only the template needs, say ready, run tasks; never returns."""
    code = 0
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for w in wakeup:
            os.close(w)
        template_pid = os.getppid()
        control.close()
        _die_with_parent()
        if os.getppid() != template_pid:  # the template died before the line above: so must this child
            os._exit(1)
        conn = Connection(fd)
        conn.send(("ready", os.getpid()))
        run_tasks(conn, config, runner)
    except BaseException:  # noqa: BLE001 - a child never goes back into the template's loop
        code = 1
        traceback.print_exc()
    finally:
        os._exit(code)


def template(fd: int) -> None:
    """The fresh template's entry point (``BOOTSTRAP``): ``fd`` is its end of the worker's pipe."""
    serve_template(Connection(fd))


def template_forked(control: Connection) -> None:
    """The template as a fork of a worker that had no thread yet (``children.early_template``); never returns.

    It keeps the worker's set-up Django and imported modules (that is the point: it is ready at once) and
    nothing else it does not need: every descriptor but stdin, stdout, stderr and its pipe now reads
    ``/dev/null`` (a socket the worker had open is not shared, and no stale object can close a descriptor
    this process opens later), and Django's database connections are dropped without a word to their server.
    """
    code = 0
    try:
        _quiet_descriptors({0, 1, 2, control.fileno()})
        _drop_database_connections()
        serve_template(control)
    except BaseException:  # noqa: BLE001 - never back into the worker's code
        code = 1
        traceback.print_exc()
    finally:
        os._exit(code)


def _quiet_descriptors(keep: set[int]) -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd not in keep and fd != devnull:
                try:
                    os.dup2(devnull, fd, inheritable=False)
                except OSError:
                    pass
    finally:
        os.close(devnull)


def _drop_database_connections() -> None:
    try:
        opened = connections.all(initialized_only=True)
    except TypeError:  # an older Django
        opened = connections.all()
    for conn in opened:
        conn.connection = None  # its socket reads /dev/null now: dropped, never closed (that would end the worker's session)


def serve_template(control: Connection) -> None:
    """The template's life: receives the ``ChildConfig``, sets up (``("ready", pid)`` or ``("error", traceback)``),
    then serves ``("fork",)`` requests, each followed by the new child's end of its pipe (``pass_descriptor``), with
    ``("forked", pid)``; ``None`` or a closed pipe ends it. Its children's ends are reported as they come.
    """
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        config: ChildConfig = control.recv()
    except (EOFError, OSError):  # the worker never needed it
        return
    try:
        runner = _setup(config)
    except BaseException:  # noqa: BLE001 - the worker reports it and stops
        control.send(("error", traceback.format_exc()))
        return
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes the wait below through wake_w
    control.send(("ready", os.getpid(), thread_count()))
    while True:
        ready = wait([control, wake_r])
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        _reap(control)
        if control not in ready:
            continue
        try:
            msg = control.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        child_fd = take_descriptor(control)
        pid = os.fork()
        if pid == 0:
            _forked(control, child_fd, (wake_r, wake_w), config, runner)
        os.close(child_fd)
        control.send(("forked", pid))
