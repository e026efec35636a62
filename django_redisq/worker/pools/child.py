"""A child of the process pool: set up Django once, then run what the worker sends, one task at a time.

The child never talks to Redis about tasks: it receives a ``Delivery`` on its
pipe and sends back ``("done", outcome, rss_bytes)`` once it has run (the
worker works out the time limit itself, so a task costs one message each way). It runs with the worker's task
settings (``TASKS``, even when they were changed at run time) and imports the
modules that define the worker's tasks, so it runs exactly what the worker
would. It ignores SIGINT and SIGTERM (the worker decides when a child stops:
a terminal's Ctrl-C reaches the whole process group) and dies with the worker.

It imports from exactly the worker's ``sys.path``. ``python -m`` would put the
working directory first, so a ``django_redisq/`` or ``django/`` planted where
the worker was started from would run in every child (the worker's own path is
the one its user chose). A child is started as ``python -c BOOTSTRAP FD
PATH...`` instead: ``BOOTSTRAP`` replaces ``sys.path`` by the worker's, given on
the command line, before it imports anything, then calls ``serve(FD)``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from importlib import import_module
from multiprocessing.connection import Connection
from typing import Any

PR_SET_PDEATHSIG = 1

BOOTSTRAP = ("import sys; sys.path[:] = sys.argv[2:]; del sys.argv[2:]; "
             "from django_redisq.worker.pools.child import serve; serve(int(sys.argv[1]))")
"""The child's whole program: ``sys`` is built in, so nothing is imported before the path is the worker's.
It names this module, so ``pgrep -f django_redisq.worker.pools.child`` still finds the children."""


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
        import resource

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
    import django
    from django.apps import apps
    from django.conf import settings

    if not apps.ready:
        django.setup()
    settings.TASKS = config.tasks
    for module in config.modules:
        import_module(module)
    from django_redisq import discovery

    discovery.load(discovery.imports_of(config.tasks.get(config.alias)))
    log = logging.getLogger("django_redisq")
    log.setLevel(config.log_level)
    if not log.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [child %(process)d] %(message)s"))
        log.addHandler(handler)
    from django_redisq.conf import get_options
    from django_redisq.worker.runner import Runner

    return Runner(get_options(config.alias), config.alias)


def main(conn: Connection, config: ChildConfig) -> None:
    """The child's whole life: set up, say ready, run deliveries until told to stop or the pipe closes."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        runner = _setup(config)
    except BaseException:  # noqa: BLE001 - the worker reports it and stops
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready", os.getpid()))
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
            from django_redisq.worker.outcome import DEAD, Outcome, error_dict

            outcome = Outcome(DEAD, error=error_dict(exc), reason="worker_error")
        conn.send(("done", outcome, rss_bytes()))


def serve(fd: int) -> None:
    """The child's entry point (``BOOTSTRAP``): ``fd`` is its end of the worker's pipe."""
    pipe = Connection(fd)
    config: ChildConfig = pipe.recv()
    main(pipe, config)
