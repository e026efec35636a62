#!/usr/bin/env python
"""Reading a big workflow: ``python bench/workflow_reads.py [--members 20000] [--repeats 3]``.

On a redis-server of its own (persistence off), enqueues a chord of N members
(no worker runs: every member pending, the callback waiting), then times,
median of ``--repeats``:

* ``get_result()`` of the callback (a step not queued yet), in ms and in Redis
  commands (``INFO commandstats``);
* ``WorkflowResult.refresh()``;
* the admin workflow page (Django's test client, a superuser): ms and bytes;
* ``manage.py redisq workflow ID``: ms and bytes of its output.

The figures of issue 36 (7.6 MB in 4.7 s, 1.1 s per ``get_result``) were taken
this way on a 20,000-member chord.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def configure(url: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="bench-only", DEBUG=False, USE_TZ=True, ALLOWED_HOSTS=["*"], ROOT_URLCONF="tests.urls",
        INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                        "django.contrib.sessions", "django.contrib.messages", "django_redisq", "tests.testapp"],
        MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware", "django.middleware.csrf.CsrfViewMiddleware",
                    "django.contrib.auth.middleware.AuthenticationMiddleware",
                    "django.contrib.messages.middleware.MessageMiddleware"],
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True, "OPTIONS": {
            "context_processors": ["django.template.context_processors.request",
                                   "django.contrib.auth.context_processors.auth",
                                   "django.contrib.messages.context_processors.messages"]}}],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],
        STATIC_URL="/static/", DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        TASKS={"default": {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": ["default", "emails"],
                           "OPTIONS": {"REDIS_URL": url, "IMPORTS": ["tests.testapp.workflow_tasks"]}}},
    )
    django.setup()


def commands(r: Any) -> int:
    """Commands Redis ran since the last call (INFO commandstats, then CONFIG RESETSTAT; neither counted)."""
    found = sum(int(v["calls"]) for k, v in r.info("commandstats").items() if not k.startswith(("cmdstat_config", "cmdstat_info")))
    r.config_resetstat()
    return found


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time in ms over ``repeats`` calls, and the last result."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from django_redisq.testing import RedisServer

    with RedisServer() as server:
        configure(server.url)
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.tasks import task_backends
        from django.test import Client
        from django.urls import reverse

        from django_redisq import chord
        from tests.testapp import workflow_tasks as wt

        call_command("migrate", verbosity=0)
        client = Client()
        client.force_login(User.objects.create_superuser("bench", "b@example.com", "pw"))
        backend = task_backends["default"]
        r = backend.broker.client
        start = time.perf_counter()
        wf = chord([wt.add.s(i, 1) for i in range(args.members)], wt.total.s()).enqueue()
        print(f"redis {r.info('server')['redis_version']}, chord of {args.members:,} members enqueued in "
              f"{time.perf_counter() - start:.2f} s; median of {args.repeats}")
        callback = wf.results[-1].id
        commands(r)
        ms, res = timed(lambda: backend.get_result(callback), args.repeats)
        per_call = commands(r) / args.repeats
        print(f"get_result(callback): {ms:9.1f} ms, {per_call:.0f} Redis commands, status {res.status}")
        ms, _ = timed(wf.refresh, args.repeats)
        print(f"WorkflowResult.refresh(): {ms:9.1f} ms")
        url = reverse("admin:django_redisq_deadletter_workflow", args=["default", wf.id])
        ms, page = timed(lambda: client.get(url), args.repeats)
        print(f"admin workflow page: {ms:9.1f} ms, {len(page.content):,} bytes, HTTP {page.status_code}")

        def cli() -> str:
            out = io.StringIO()
            call_command("redisq", "workflow", wf.id, stdout=out)
            return out.getvalue()

        ms, text = timed(cli, args.repeats)
        print(f"redisq workflow ID: {ms:9.1f} ms, {len(text):,} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
