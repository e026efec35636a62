"""Measure another Django Tasks backend on Redis the way ``run.py``'s ``aenqueue`` section measures ours.

Run by ``bench/run.py`` with ``bench/.django-peers-venv``'s Python (Django 6 and the peers)::

    .django-peers-venv/bin/python peers/django_tasks_peer.py vtasks --url redis://127.0.0.1:PORT/0

Prints one ``RESULT {json}`` line: enqueue/s from a thread, aenqueue/s awaited one by one on a
running loop and N at once (``common.enqueue_modes``), and whether the backend has an ``aenqueue``
of its own or Django's default (``sync_to_async``, a thread hop per call).
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

PEERS = Path(__file__).resolve().parent
sys.path[:0] = [str(PEERS), str(PEERS.parent)]

import redis  # noqa: E402
from common import enqueue_modes  # noqa: E402

PEERS_OF = {
    # name: (package, backend class, its OPTIONS for a URL, installed app)
    "vtasks": ("django-vtasks", "django_vtasks.backends.valkey.ValkeyTaskBackend", "BROKER_URL", "django_vtasks"),
    "tasks-redis": ("django-tasks-redis", "django_tasks_redis.backends.RedisTaskBackend", "REDIS_URL", "django_tasks_redis"),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=sorted(PEERS_OF))
    ap.add_argument("--url", required=True)
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--concurrency", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    package, backend_path, url_option, app = PEERS_OF[args.peer]

    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=[app], USE_TZ=True, SECRET_KEY="bench-only",
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        TASKS={"default": {"BACKEND": backend_path, "QUEUES": ["default"], "OPTIONS": {url_option: args.url}}},
    )
    django.setup()
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from dtpeer_tasks import noop

    backend = task_backends["default"]
    own = type(backend).aenqueue is not BaseTaskBackend.aenqueue
    redis.Redis.from_url(args.url).flushall()
    rates = enqueue_modes(noop.enqueue, noop.aenqueue, count=args.count, seconds=args.seconds,
                          concurrency=args.concurrency, rounds=args.rounds)
    print("RESULT " + json.dumps({"peer": args.peer, "package": package, "version": metadata.version(package),
                                  "aenqueue": "its own" if own else "Django's default (sync_to_async)", "rates": rates}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
