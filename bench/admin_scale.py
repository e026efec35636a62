#!/usr/bin/env python
"""The admin at scale: ``python bench/admin_scale.py [--dead 100000] [--repeats 5]``.

Starts its own redis-server (persistence off), seeds N dead letters through the
engine's own scripts (enqueue.lua, fetch.lua, bury.lua, pipelined: see
tests/seed.py), then times with Django's test client, logged in as a superuser:

* the dead-letter list: first page, last page, a filter matching 1 in 4, a
  search matching one old dead letter (walks until the per-request budget,
  then its "Older" slice finds it), a filter matching nothing;
* the detail page, and the confirmation page of "replay all" (which counts);
* replay of every dead letter: through the admin (its one-second slices, as a
  browser follows them) and through ``manage.py redisq dead replay --all``.

For each it also reports the longest single script call inside Redis (from
SLOWLOG), which is how long a worker's command could wait behind it.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
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
                        "django.contrib.sessions", "django.contrib.messages", "django_redisq"],
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
        TASKS={"default": {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": ["default", "other"],
                           "OPTIONS": {"REDIS_URL": url}}},
    )
    django.setup()
    from django.test.utils import setup_test_environment

    setup_test_environment()  # so the test client hands back each response's context


class Slowlog:
    """The longest script call Redis ran between ``reset()`` and ``longest()``, in ms."""

    def __init__(self, client: Any) -> None:
        self.client = client
        client.config_set("slowlog-max-len", 100_000)

    def reset(self) -> None:
        self.client.config_set("slowlog-log-slower-than", 100)  # µs: every script call that could matter
        self.client.slowlog_reset()

    def longest(self) -> float:
        entries = self.client.slowlog_get(100_000)
        self.client.config_set("slowlog-log-slower-than", -1)
        # commands run inside a script are logged too (client "?:0"); keep the script calls themselves
        calls = [e["duration"] for e in entries
                 if bytes(e["command"]).upper().startswith((b"EVALSHA", b"EVAL ")) and e.get("client_address") != b"?:0"]
        return max(calls, default=0) / 1000


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
    ap.add_argument("--dead", type=int, default=100_000, help="dead letters to seed (default: %(default)s)")
    ap.add_argument("--repeats", type=int, default=5, help="renders per page, median reported (default: %(default)s)")
    args = ap.parse_args()

    from django_redisq.testing import RedisServer

    with RedisServer() as server:
        configure(server.url)
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.test import Client
        from django.urls import reverse

        from django_redisq.settings.read import get_options
        from django_redisq.store.broker import Broker
        from tests.seed import seed_dead

        call_command("migrate", verbosity=0)
        client = Client()
        client.force_login(User.objects.create_superuser("bench", "b@example.com", "pw"))
        broker = Broker(get_options("default"))
        slow = Slowlog(broker.client)
        broker.client.config_set("slowlog-log-slower-than", -1)
        n = args.dead
        print(f"redis {broker.client.info('server')['redis_version']}, {n:,} dead letters, median of {args.repeats} renders")

        def seed() -> float:
            start = time.perf_counter()
            seed_dead(broker, "default", n)
            return time.perf_counter() - start

        took = seed()
        mem = broker.client.info("memory")["used_memory_human"]
        print(f"seeded in {took:.1f} s through enqueue/fetch/bury ({n / took:,.0f}/s); Redis uses {mem}")

        url = reverse("admin:django_redisq_deadletter_changelist")
        last_start = (n - 1) // 50 * 50
        one_id = broker.operator.dead_ids("default", 1, newest_first=True)[0]
        pages = [
            ("list, first page", {}),
            ("list, last page", {"start": last_start}),
            ("filter task=send_receipt (1 in 4)", {"task": "send_receipt"}),
            ("search 'order 12345' (one old match)", {"q": "order 12345 "}),
            ("  ... its next slice ('Older')", None),
            ("filter matching nothing", {"exc": "NoSuchError"}),
        ]
        rows: list[tuple[str, float, float, str]] = []
        page: Any = None
        previous: dict[str, Any] = {}
        for name, params in pages:
            if params is None:  # follow the previous page's "Older" link, as an operator would
                params = {**previous, "start": page.next_start, "top": page.top}
            slow.reset()
            ms, response = timed(partial(client.get, url, params), args.repeats)
            assert response.status_code == 200, response.status_code
            page, previous = response.context["page"], params
            rows.append((name, ms, slow.longest(), f"{len(page.items)} rows, looked at {page.scanned:,}"
                         + (" (budget reached)" if page.budget_hit else "")))
        slow.reset()
        ms, response = timed(lambda: client.get(reverse("admin:django_redisq_deadletter_detail",
                                                        args=["default", "default", one_id])), args.repeats)
        rows.append(("detail page", ms, slow.longest(), f"status {response.status_code}"))
        action = reverse("admin:django_redisq_deadletter_action")
        confirms: list[tuple[str, dict[str, str]]] = [("confirm 'replay all' (counts)", {}),
                                                      ("confirm 'replay all' filtered", {"task": "charge_card"})]
        for name, extra in confirms:
            slow.reset()
            data = {"action": "replay", "queue": "default", "scope": "all", **extra}
            ms, response = timed(partial(client.post, action, data), args.repeats)
            rows.append((name, ms, slow.longest(), f"count {response.context['count']:,}"))

        # replay everything through the admin, following its progress pages as a browser does
        slow.reset()
        start = time.perf_counter()
        response = client.post(action, {"action": "replay", "queue": "default", "scope": "all"})
        data, steps = {**dict(response.context["fields"]), "confirm": "yes"}, 0
        while True:
            response = client.post(action, data)
            steps += 1
            if response.status_code == 302:
                break
            data = dict(response.context["fields"])
        seconds = time.perf_counter() - start
        left = broker.client.zcard(broker.keys("default").dead)
        pending = broker.client.llen(broker.keys("default").pending)
        rows.append(("replay all via the admin", seconds * 1000, slow.longest(),
                     f"{pending:,} pending, {left} dead left, {steps} requests"))

        # and through the command, after a fresh seed
        broker.client.flushall()
        seed()
        slow.reset()
        start = time.perf_counter()
        out = io.StringIO()
        call_command("redisq", "dead", "replay", "--all", stdout=out, stderr=io.StringIO())
        seconds = time.perf_counter() - start
        rows.append(("replay all via manage.py redisq", seconds * 1000, slow.longest(), out.getvalue().strip()))

        width = max(len(r[0]) for r in rows)
        print(f"\n{'':<{width}}  {'wall ms':>9}  {'longest script ms':>17}")
        for name, ms, longest, note in rows:
            print(f"{name:<{width}}  {ms:>9.1f}  {longest:>17.2f}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
