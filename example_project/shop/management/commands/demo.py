"""``manage.py demo``: the whole story of a few tasks, on the configured Redis.

Places an order through the view (which enqueues its receipt), enqueues a
task that fails twice then succeeds, one that always fails, and a delayed one;
runs a worker until each has settled, and reports what happened.

The report is the story: the worker's own log lines (one per task, the
tracebacks of failed attempts) and Django's task log lines are debug output
here, shown with ``-v 3`` only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.test import Client
from django.utils import timezone

from django_redisq import signals
from django_redisq.compat import LOGGER_NAME, TaskResult, TaskResultStatus
from django_redisq.exceptions import RedisUnavailable
from django_redisq.ops.inspector import Inspector
from django_redisq.worker.worker import Worker
from shop import tasks
from shop.models import Order


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM: leave through ``handle``'s ``finally`` (which stops the embedded Redis), exit status 143."""
    raise SystemExit(128 + signum)


def _shown(path: str, base: str) -> str:
    """``path`` as the command line typed in ``base`` can give it: relative when near, else absolute."""
    rel = os.path.relpath(path, base)
    return rel if not rel.startswith(os.pardir + os.sep + os.pardir) else os.path.abspath(path)


def manage_command() -> str:
    """``<python> <manage.py>`` that works as written in the directory the demo was started from.

    ``make demo`` runs the demo in example_project/ and says where it was typed
    (``DEMO_FROM``, the repository root), so the hints read
    ``.venv/bin/python example_project/manage.py ...``; run by hand, the current directory.
    The project's paths (the database, the embedded Redis's data file) are absolute.
    """
    base = os.environ.get("DEMO_FROM") or os.getcwd()
    python = sys.executable or "python"
    return f"{shlex.quote(_shown(python, base))} {shlex.quote(_shown(os.path.abspath(sys.argv[0]), base))}"


@contextlib.contextmanager
def own_embedded_redis() -> Iterator[int]:
    """With ``EMBEDDED`` settings, start the project's embedded Redis here if it is not running, and stop it at the end.

    The embedded server outlives the process that started it (``manage.py redisq
    embedded stop`` stops it); the demo cleans up after itself, so it stops the one
    it started. The value is its PID (0 when there is none of ours: a Redis URL, or a
    server already running, which is left alone).
    """
    if not settings.TASKS["default"]["OPTIONS"].get("EMBEDDED"):
        yield 0
        return
    server = Inspector.for_alias("default").embedded()
    if server.pid() is not None:
        yield 0
        return
    server.ensure()
    pid = server.pid() or 0
    try:
        yield pid
    finally:
        if pid:
            server.stop()


@contextlib.contextmanager
def quiet_logs(verbosity: int) -> Iterator[None]:
    """Below ``-v 3``, keep the task and worker log lines out of the story: worker errors still show, and each
    task's failure is told by the story itself (not by the error reports of ``django_redisq.errors`` too)."""
    levels = {LOGGER_NAME: logging.CRITICAL, "django_redisq": logging.ERROR, "django_redisq.errors": logging.CRITICAL}
    saved = {name: logging.getLogger(name).level for name in levels}
    if verbosity < 3:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


class Command(BaseCommand):
    help = "Run the django-redisq demo: enqueue a few tasks, run a worker, report."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for every task to settle")

    def handle(self, *args: Any, **opts: Any) -> None:
        signals.task_retried.connect(self.on_retried)
        signals.task_dead_lettered.connect(self.on_dead_lettered)
        previous = signal.signal(signal.SIGTERM, _terminated)
        self.redis_pid = 0
        try:
            with quiet_logs(opts["verbosity"]), own_embedded_redis() as self.redis_pid:
                self.story(opts)
        except KeyboardInterrupt:  # Ctrl-C: stop as cleanly as at the end
            self.stderr.write("\nInterrupted.")
            raise SystemExit(130) from None
        finally:
            signal.signal(signal.SIGTERM, previous)
            signals.task_retried.disconnect(self.on_retried)
            signals.task_dead_lettered.disconnect(self.on_dead_lettered)
            if self.redis_pid:  # own_embedded_redis has stopped it
                self.stdout.write(f"Stopped the embedded redis-server (pid {self.redis_pid}).")

    # django_redisq's signals, sent by the worker once Redis has taken the step
    def on_retried(self, sender: Any, task_name: str, attempt: int, error: dict[str, Any], delay_ms: int, **kw: Any) -> None:
        self.stdout.write(f"  retry: {task_name.rsplit('.', 1)[-1]} attempt {attempt} failed "
                          f"({error['exc'].rsplit('.', 1)[-1]}: {error['msg']}); next attempt in {delay_ms} ms")

    def on_dead_lettered(self, sender: Any, task_name: str, attempt: int, reason: str, error: dict[str, Any], **kw: Any) -> None:
        self.stdout.write(f"  dead letter: {task_name.rsplit('.', 1)[-1]} after attempt {attempt} ({reason}: "
                          f"{error['exc'].rsplit('.', 1)[-1]}: {error['msg']})")

    def story(self, opts: dict[str, Any]) -> None:
        call_command("migrate", verbosity=0)
        worker = Worker(concurrency=2, burst=True, name="demo-worker")
        try:
            worker.check_server()
        except RedisUnavailable as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"Redis: {worker.where}" + (f" (embedded redis-server, pid {self.redis_pid})" if self.redis_pid else "") + "\n")

        response = Client().post("/", {"email": "ada@example.com"})
        order = Order.objects.latest("pk")
        self.stdout.write(f"POST / -> {response.status_code}: placed {order}, receipt task {order.receipt_task_id}")
        duplicate = tasks.send_receipt.delay(order.pk)
        self.stdout.write(
            f"send_receipt.delay({order.pk}) again -> same task {duplicate.id} (idempotency key receipt-{order.pk})"
        )
        results: list[TaskResult] = [
            tasks.send_receipt.get_result(order.receipt_task_id),
            tasks.sync_stock.delay(order.pk),
            tasks.notify_warehouse.delay(order.pk),
            tasks.feedback_reminder.using(run_after=timezone.now() + timedelta(seconds=2)).enqueue(order.pk),
        ]
        self.stdout.write(f"Enqueued {len(results)} tasks; running a worker until they settle...\n")

        deadline = time.monotonic() + opts["timeout"]
        while True:
            worker = Worker(concurrency=2, burst=True, name="demo-worker")
            worker.run()
            for r in results:
                r.refresh()
            if all(r.is_finished for r in results) or time.monotonic() > deadline:
                break
            time.sleep(0.1)  # retries and the delayed task are scheduled a moment ahead

        self.stdout.write("\nWhat happened:")
        for r in results:
            self.stdout.write("  " + self.describe(r))
        self.periodic()
        order.refresh_from_db()
        self.stdout.write(f"\nOrder #{order.pk} receipt_sent={order.receipt_sent}")
        dead = [r for r in results if r.status == TaskResultStatus.FAILED]
        manage = manage_command()
        self.stdout.write(
            f"Dead letters: {len(dead)} from this run, kept in Redis under {worker.broker.keys('default').dead!r}.\n"
            f"Review and replay them in the admin:\n  {manage} createsuperuser && {manage} runserver\n"
            f"then open http://127.0.0.1:8000/admin/ ; or run tasks live with:\n  {manage} runworker"
        )
        if not all(r.is_finished for r in results):
            raise CommandError("some tasks did not settle before --timeout")

    def periodic(self) -> None:
        """Run a worker with its scheduler (not burst) until the 'stock-report' schedule has fired once."""
        from django.core.cache import cache

        self.stdout.write("\nPeriodic tasks: a worker with its scheduler, until the next 'stock-report' tick (every 5 s) runs...")
        cache.delete("shop:last_stock_report")
        worker = Worker(concurrency=1, name="demo-scheduler")
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 12
        while cache.get("shop:last_stock_report") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        worker.request_stop()
        thread.join(15)
        tick = cache.get("shop:last_stock_report")
        if tick is None:
            raise CommandError("the 'stock-report' schedule did not fire within 12 s")
        self.stdout.write(f"  stock_report ran for tick {tick}: claimed once on the Redis clock, however many workers run")

    def describe(self, r: TaskResult) -> str:
        name = r.task.name
        line = f"{name:<18} {r.id}  {r.status:<10} attempts={r.attempts}"
        if r.status == TaskResultStatus.SUCCESSFUL:
            line += f"  -> {r.return_value!r}"
        if r.errors:
            last = r.errors[-1].traceback.strip().splitlines()[-1]
            line += f"  errors={len(r.errors)} last: {last}"
        return line
