"""``manage.py runworker``: parse options, build a Worker, install signals, run."""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser, SystemCheckError
from django.utils import autoreload

from django_redisq.apps import SUCCESS_LOGGER
from django_redisq.compat import LOGGER_NAME, task_backends
from django_redisq.exceptions import RedisUnavailable
from django_redisq.management.cli import out as _out  # the exit codes and one-line errors redisq uses too
from django_redisq.management.cli.args import memory, one_voice, port, positive
from django_redisq.settings import discovery
from django_redisq.settings.profiles import get_profile, parse_queue_args
from django_redisq.settings.read import get_options
from django_redisq.worker.pools import POOLS
from django_redisq.worker.worker import Worker

LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}
EXIT_WITHIN = 5.0
"""Seconds a second SIGINT/SIGTERM gives the worker to hand back what it holds before the process exits anyway."""


class BatchedStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr through a buffer flushed every ``interval`` seconds, and at once for warnings.

    A log line per task then costs no system call per task; lines show up
    within ``interval``, and everything is flushed when the command ends.
    Its flushing thread starts with the first record, so the worker has no
    thread until it logs (the process pool forks its template before that).
    In a fork (the pool's template and children) it writes each record at
    once, not what the worker had buffered.
    """

    def __init__(self, interval: float = 0.25) -> None:
        super().__init__(self._stderr(write_through=False))
        self.interval = interval
        self._last = time.monotonic()
        self._ticking = False
        self._forked = False
        os.register_at_fork(after_in_child=self._after_fork)

    @staticmethod
    def _stderr(write_through: bool) -> io.TextIOWrapper:
        return io.TextIOWrapper(io.FileIO(sys.stderr.fileno(), "w", closefd=False), write_through=write_through)

    def _after_fork(self) -> None:
        self.stream = self._stderr(write_through=True)
        self._forked = True

    def _tick(self) -> None:
        while True:
            time.sleep(self.interval)
            self.flush_now()

    def emit(self, record: logging.LogRecord) -> None:
        if not self._ticking and not self._forked:  # emit runs under the handler's lock: one thread is started
            self._ticking = True
            threading.Thread(target=self._tick, name="redisq-log-flush", daemon=True).start()
        super().emit(record)
        if record.levelno >= logging.WARNING:
            self.flush_now()

    def flush(self) -> None:  # called by emit for every record: only flush when due
        if time.monotonic() - self._last >= self.interval:
            self.flush_now()

    def flush_now(self) -> None:
        self._last = time.monotonic()
        with self.lock or threading.RLock():
            try:
                self.stream.flush()
            except (OSError, ValueError):
                pass


def banner(worker: Worker) -> str:
    """The start line: who serves what, how, against which Redis (never its credentials)."""
    o = worker.options
    order = f"{worker.order.describe()} (weighted)" if worker.order.weighted else worker.order.describe()
    return (f"django_redisq worker {worker.id} (pid {os.getpid()}) serving {order} of backend {o.alias!r} "
            f"with {worker.describe_pool()} ({worker.pool.name} pool) on {worker.where}; "
            f"heartbeat every {o.heartbeat_interval:g}s, reaped after {o.worker_timeout:g}s")


def _token(path: str | None) -> str | None:
    """The bearer token in ``path`` (surrounding whitespace dropped); an empty file never opens the endpoint."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except UnicodeDecodeError:
        raise CommandError(f"--metrics-token-file: {path} is not UTF-8 text") from None
    if not token:
        raise CommandError(f"--metrics-token-file: {path} holds no token")
    return token


class Command(BaseCommand):
    help = "Run tasks from django_redisq queues. First SIGTERM/SIGINT: finish running tasks and exit; second: exit now."
    # the task backends' checks only (``_check_backends``), not the whole project's: those are for the deploy's
    # ``check``, ``migrate`` and ``runserver``, and cost a worker's every start (and restart) their time
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        positional = "queues are positional here: runworker default emails (or emails:3 default:1, weighted)"
        # a usage error is one line, exit 2 (cli/out.py has the exit codes); the options other tools take for queues
        one_voice(parser, hints=dict.fromkeys(("--queue", "--queues", "-Q", "-q"), positional))
        parser.add_argument("queues", nargs="*", metavar="QUEUE[:WEIGHT]",
                            help="queues to serve, most important first (strict order); with weights (emails:6 default:3 "
                                 "low:1), each queue with work is picked in proportion to its weight (default: all configured)")
        parser.add_argument("--profile", default=None, metavar="NAME",
                            help="serve the worker profile NAME of OPTIONS['WORKERS'] (its queues, order, concurrency, pool)")
        parser.add_argument("--backend", default="default", help="the TASKS alias to serve (default: %(default)s)")
        parser.add_argument("--pool", choices=POOLS, default=None,
                            help="how tasks run: on threads, in child processes (CPU-bound tasks, hard time limits) "
                                 "or on an asyncio event loop (async def tasks) (default: threads)")
        parser.add_argument("--concurrency", "-c", type=positive, default=None,
                            help="tasks run at once: threads, child processes or asyncio tasks (default: 1)")
        parser.add_argument("--max-tasks-per-child", type=positive, default=None,
                            help="process pool: replace a child after this many tasks")
        parser.add_argument("--max-memory-per-child", type=memory, default=None, metavar="SIZE",
                            help="process pool: replace a child whose resident memory exceeds SIZE after a task "
                                 "(bytes, or with K, M or G: 512M)")
        parser.add_argument("--prefetch", type=positive, default=None, help="tasks held per queue, running included (default: automatic, from task durations)")
        parser.add_argument("--burst", action="store_true", help="run until the queues are empty, then exit")
        parser.add_argument("--reload", action="store_true",
                            help="development: start again when a Python file changes, as runserver does (Django's "
                                 "autoreloader); the running tasks finish first")
        parser.add_argument("--max-tasks", type=positive, default=None, help="exit after settling this many tasks")
        parser.add_argument("--no-scheduler", action="store_false", dest="scheduler",
                            help="do not claim periodic ticks in this worker (by default every worker does; each tick runs once)")
        parser.add_argument("--name", default=None, help="worker name (default: host.pid); the worker id adds a per-process suffix")
        parser.add_argument("--metrics-port", type=port, default=None, metavar="PORT",
                            help="serve this worker's Prometheus metrics on PORT (0: any free port, logged); needs django-redisq[metrics]")
        parser.add_argument("--metrics-host", default="127.0.0.1", metavar="HOST",
                            help="address the metrics endpoint listens on (default: %(default)s, loopback only)")
        parser.add_argument("--metrics-token-file", default=None, metavar="PATH",
                            help="answer the metrics endpoint only with 'Authorization: Bearer <the token in PATH>' (401 otherwise)")
        parser.add_argument("--health-file", default=None, metavar="PATH",
                            help="rewrite PATH after every heartbeat Redis answered: a liveness probe checks its age "
                                 "(put it in a directory only the worker's user can write to)")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["reload"]:
            if opts["burst"] or opts["max_tasks"]:
                raise _out.usage("--reload serves until stopped: not with --burst or --max-tasks")
            autoreload.run_with_reloader(self._reloaded, **opts)
            return
        self._serve(opts, reloading=False)

    def _reloaded(self, **opts: Any) -> None:
        """The worker in Django's autoreloader: on this thread, while the main thread watches the files."""
        self._serve(opts, reloading=True)

    def _serve(self, opts: dict[str, Any], reloading: bool) -> None:
        self._check_backends()
        self._configure_logging(opts["verbosity"])
        self._discover(opts["backend"])
        worker = self._build(opts)
        if opts["health_file"]:  # a path another user controls: refused before anything starts
            try:
                worker.observer.write_health_file(opts["health_file"])
            except (ImproperlyConfigured, OSError) as exc:
                raise CommandError(f"--health-file: {exc}") from None
        log = logging.getLogger("django_redisq")
        log.log(logging.DEBUG if opts["burst"] else logging.INFO, "%s", banner(worker))
        for warning in worker.durability_warnings():
            log.warning(warning)
        self._serve_metrics(worker, opts)
        served = threading.Event()
        if reloading:
            self._reload_gently(worker, served)
        else:
            self._install_signals(worker)
        try:
            worker.run()
        except ImproperlyConfigured as exc:  # e.g. a process-pool child that cannot set up
            raise CommandError(str(exc)) from None
        finally:
            served.set()
            worker.observer.stop()
            self._flush_logs()

    @staticmethod
    def _discover(alias: str) -> None:
        """Import what enqueue checks a task against (settings/discovery.py): the apps' tasks modules and OPTIONS["IMPORTS"]."""
        try:
            discovery.load(discovery.imports_of(getattr(settings, "TASKS", {}).get(alias)))
        except ImportError as exc:
            raise CommandError(f"TASKS[{alias!r}]['OPTIONS']['IMPORTS']: {exc}") from None

    def _build(self, opts: dict[str, Any]) -> Worker:
        """The worker the command line (or its profile) asks for, its Redis checked; each mistake said in one line."""
        try:
            queues, concurrency, pool, prefetch = self._served(opts)
            self._known(opts["backend"], list(queues))
            worker = Worker(
                queues, backend=opts["backend"], concurrency=concurrency, name=opts["name"],
                burst=opts["burst"], max_tasks=opts["max_tasks"], prefetch=prefetch,
                scheduler=None if opts["scheduler"] else False, pool=pool,
                max_tasks_per_child=opts["max_tasks_per_child"], max_memory_per_child=opts["max_memory_per_child"],
            )
            worker.check_server()
        except RedisUnavailable as exc:
            raise _out.unreachable(opts["backend"], "", exc) from None
        except ValueError as exc:  # queues the settings do not name, a bad weight
            raise _out.usage(str(exc)) from None
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        except Exception as exc:
            if "InvalidTaskBackend" in type(exc).__name__:
                raise _out.usage(f"no task backend {opts['backend']!r} in TASKS") from None
            raise
        return worker

    @staticmethod
    def _serve_metrics(worker: Worker, opts: dict[str, Any]) -> None:
        """--metrics-port: the worker's own metrics endpoint, with its bearer token if one is given."""
        if opts["metrics_token_file"] and opts["metrics_port"] is None:
            raise _out.usage("--metrics-token-file needs --metrics-port")
        if opts["metrics_port"] is None:
            return
        try:
            token = _token(opts["metrics_token_file"])
            port = worker.observer.serve_metrics(opts["metrics_host"], opts["metrics_port"], token)
        except (ImproperlyConfigured, OSError) as exc:
            raise CommandError(f"--metrics-port/--metrics-token-file: {exc}") from None
        logging.getLogger("django_redisq").info("metrics of worker %s at http://%s:%d/metrics%s", worker.id,
                                                opts["metrics_host"], port, " (bearer token required)" if token else "")

    def _served(self, opts: dict[str, Any]) -> tuple[list[str] | dict[str, int], int, str, int | None]:
        """Queues (a dict of weights for the weighted order), concurrency, pool, prefetch: the command line, else the profile."""
        if opts["profile"] is None:
            try:
                names, weights = parse_queue_args(opts["queues"])
            except ValueError as exc:
                raise _out.usage(str(exc)) from None
            return weights or names, opts["concurrency"] or 1, opts["pool"] or "threads", opts["prefetch"]
        if opts["queues"]:
            raise _out.usage(f"give queues or --profile, not both (profile {opts['profile']!r} names its queues)")
        try:
            profile = get_profile(get_options(opts["backend"]).workers, opts["profile"])
        except LookupError as exc:
            raise _out.usage(str(exc)) from None
        return (profile.queue_arg(), opts["concurrency"] or profile.concurrency or 1, opts["pool"] or profile.pool or "threads",
                opts["prefetch"] or profile.prefetch)

    @staticmethod
    def _known(alias: str, queues: list[str]) -> None:
        """A backend or queue the settings do not name is a wrong command line (exit 2), said before anything starts."""
        if alias not in getattr(settings, "TASKS", {}):
            raise _out.usage(f"TASKS has no backend {alias!r}; configured: {', '.join(getattr(settings, 'TASKS', {})) or 'none'}.")
        configured = get_options(alias).queues
        unknown = [q for q in queues if q not in configured]
        if unknown:
            raise _out.usage(f"queue {unknown[0]!r} is not in TASKS[{alias!r}]['QUEUES'] {list(configured)}.")

    handler: BatchedStderrHandler | None = None

    def _flush_logs(self) -> None:
        if self.handler is not None:
            self.handler.flush_now()

    def _check_backends(self) -> None:
        """The task backends' system checks (ours: TASKS and its OPTIONS, the schedules): errors stop the worker
        as Django's check would (``SystemCheckError``, exit 1); warnings are printed."""
        found = [m for backend in task_backends.all() for m in backend.check() if not m.is_silenced()]
        serious = [m for m in found if m.is_serious()]
        if serious:
            raise SystemCheckError("System check identified some issues:\n\nERRORS:\n" + "\n".join(str(m) for m in serious))
        for m in found:
            self.stderr.write(f"WARNING: {m}")

    def _configure_logging(self, verbosity: int) -> None:
        # Django's own task signal receivers build two INFO records per task that its
        # default LOGGING then drops (DEBUG off), and an ERROR with the traceback of a task's
        # last failure, which the worker's own WARNING line for the attempt already carries:
        # skip them unless configured, so each traceback is logged once
        if LOGGER_NAME not in (getattr(settings, "LOGGING", {}) or {}).get("loggers", {}):
            logging.getLogger(LOGGER_NAME).setLevel(logging.CRITICAL)
        log = logging.getLogger("django_redisq")
        log.setLevel(LEVELS.get(verbosity, logging.INFO))
        if verbosity >= 2:  # -v 2: a line per successful task too (apps.py keeps it off by default)
            logging.getLogger(SUCCESS_LOGGER).setLevel(logging.INFO)
        if not log.handlers and not logging.getLogger().handlers:
            self.handler = BatchedStderrHandler()
            self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            log.addHandler(self.handler)

    def _reload_gently(self, worker: Worker, served: threading.Event) -> None:
        """Under --reload, a changed file stops the worker warmly before the process starts again: its running tasks
        finish (up to SHUTDOWN_GRACE) and what it holds goes back. At an exit without that (Ctrl-C), what it still
        holds goes back to pending."""
        log = logging.getLogger("django_redisq")

        def on_change(sender: Any, file_path: Any, **kwargs: Any) -> None:
            log.warning("%s changed; reloading", file_path)
            worker.request_stop("reloading")
            served.wait(worker.options.shutdown_grace + 5)  # then Django's reloader starts the process again
            self._flush_logs()  # the reloader exits this process next: what it logged must be out first

        def at_exit() -> None:
            if not served.is_set():
                with contextlib.suppress(Exception):  # leaving anyway: the reaper is the fallback
                    worker.hand_back_now()

        autoreload.file_changed.connect(on_change, weak=False)
        atexit.register(at_exit)

    def _install_signals(self, worker: Worker) -> None:
        def exit_now() -> None:
            """The second signal's work, on a thread of its own: the handler interrupted a thread that may hold the
            locks this takes. Whatever happens, the process exits within EXIT_WITHIN seconds."""
            threading.Timer(EXIT_WITHIN, os._exit, (1,)).start()
            log = logging.getLogger("django_redisq")
            try:
                handed = worker.hand_back_now()
            except Exception as exc:  # noqa: BLE001 - exiting now whatever happens: the reaper is the fallback
                log.warning("second signal: exiting now; the running tasks could not be handed back (%s): another "
                            "worker reaps them", exc)
            else:
                log.warning("second signal: exiting now; %d task(s) handed back to pending (the running ones with "
                            "their attempt counted)", handed)
            self._flush_logs()
            worker.pool.kill()
            os._exit(1)

        def on_signal(signum: int, frame: Any) -> None:
            if worker.stopping:
                threading.Thread(target=exit_now, name="redisq-exit", daemon=True).start()
                return
            worker.request_stop(signal.Signals(signum).name)  # the worker says what it waits for (Worker.stop_line)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
