#!/usr/bin/env python
"""The cost of one metrics scrape: ``python bench/metrics_scrape.py [--pending 1000000] [--scrapes 200]``.

Starts its own redis-server (persistence off) and times the fleet metrics
view (``django_redisq.views.metrics`` through Django's test client: the Redis
reads, the exposition text, the response) and ``Inspector.figures`` alone,
first on empty queues, then with ``--pending`` tasks waiting in one queue
(enqueued through enqueue.lua, in pipelined batches), some scheduled, some
dead, and ``--workers`` registered workers each holding a few tasks. It also
counts the Redis commands one scrape sends (``INFO stats``): the claim is
that a scrape costs O(queues + workers), never O(tasks).

Last, the hot-path cost of the per-worker metrics (``runworker
--metrics-port``): CPU time of ``WorkerMetrics.settled`` per settled task,
over batches of 32 tasks of 8 task types on 2 queues.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
QUEUES = ["default", "emails", "reports"]


def configure(url: str) -> None:
    import django
    from django.conf import settings

    settings.configure(
        SECRET_KEY="bench-only", DEBUG=False, USE_TZ=True, ALLOWED_HOSTS=["*"], ROOT_URLCONF="tests.urls",
        INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                        "django.contrib.sessions", "django.contrib.messages", "django_redisq"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}},
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
        TASKS={"default": {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": QUEUES, "OPTIONS": {"REDIS_URL": url}}},
    )
    django.setup()


def timed(fn: Callable[[], Any], n: int) -> dict[str, float]:
    fn()  # warm: scripts, connections, imports
    ms = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t) * 1000)
    ms.sort()
    return {"median_ms": statistics.median(ms), "p99_ms": ms[int(0.99 * (len(ms) - 1))], "max_ms": ms[-1]}


def commands_per_scrape(r: Any, fn: Callable[[], Any]) -> int:
    before = r.info("stats")["total_commands_processed"]
    fn()
    return int(r.info("stats")["total_commands_processed"] - before - 1)


def fill(broker: Any, queue: str, n: int, delay_ms: int = 0, batch: int = 1000) -> float:
    from django_redisq.store.steps.replies import NewTask  # bench's imports wait for Django's setup
    from tests.seed import message

    msg = message("bench.noop", queue, [1])
    t = time.perf_counter()
    for lo in range(0, n, batch):
        broker.enqueue(queue, [NewTask(f"{queue}-{delay_ms}-{i}", msg, "bench.noop", delay_ms, "") for i in range(lo, min(n, lo + batch))])
    return time.perf_counter() - t


def observe_cost(n: int = 200_000) -> float:
    """Microseconds of CPU per settled task that the per-worker metrics add."""
    from django_redisq.store.steps.replies import RUN, Delivery
    from django_redisq.worker.observability.metrics import WorkerMetrics
    from django_redisq.worker.running.outcome import Outcome

    m = WorkerMetrics({"worker": "bench"}, lambda: 0, lambda: 0.0, 4)
    batch = [(Delivery(f"id{i}", f"q{i % 2}", RUN, "", 1, 0, enqueued_at=1000, started_at=1003, task=f"t{i % 8}"),
              Outcome("success", task_name=f"shop.tasks.t{i % 8}", duration=0.0004 * (i % 5))) for i in range(32)]
    m.settled(batch)
    t = time.process_time()
    for _ in range(n // len(batch)):
        m.settled(batch)
    return (time.process_time() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pending", type=int, default=1_000_000, help="tasks waiting in queue 'default' (default: %(default)s)")
    ap.add_argument("--workers", type=int, default=20, help="registered workers, each holding 4 tasks (default: %(default)s)")
    ap.add_argument("--scrapes", type=int, default=200, help="scrapes timed per state (default: %(default)s)")
    args = ap.parse_args()
    import redis

    from django_redisq.testing import RedisServer

    with RedisServer() as server:
        configure(server.url)
        from django.test import Client

        from django_redisq.ops.inspector import Inspector
        from django_redisq.settings.read import get_options
        from django_redisq.store.broker import Broker
        from tests.seed import seed_dead

        r = redis.Redis.from_url(server.url)
        broker = Broker(get_options("default"))
        ins = Inspector.for_alias("default")
        client = Client()

        def view() -> None:
            response = client.get("/metrics/")
            assert response.status_code == 200

        results: dict[str, Any] = {"pending": args.pending, "workers": args.workers, "queues": len(QUEUES)}
        results["empty"] = {"view": timed(view, args.scrapes), "figures": timed(ins.figures, args.scrapes),
                            "commands": commands_per_scrape(r, ins.figures)}
        took = fill(broker, "default", args.pending)
        fill(broker, "emails", 10_000, delay_ms=3_600_000)
        seed_dead(broker, "emails", 10_000)
        for w in range(args.workers):
            broker.heartbeat(QUEUES, f"bench-w{w}", {})
            broker.fetch("default", f"bench-w{w}", 4)
        mem = r.info("memory")["used_memory_human"]
        print(f"seeded {args.pending:,} pending in {took:.1f} s; Redis uses {mem}")
        results["full"] = {"view": timed(view, args.scrapes), "figures": timed(ins.figures, args.scrapes),
                           "commands": commands_per_scrape(r, ins.figures)}
        body = client.get("/metrics/").content.decode()
        results["lines"] = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
        for state in ("empty", "full"):
            s = results[state]
            print(f"{state:>5}: view median {s['view']['median_ms']:.2f} ms, p99 {s['view']['p99_ms']:.2f} ms, max "
                  f"{s['view']['max_ms']:.2f} ms; figures() median {s['figures']['median_ms']:.2f} ms; "
                  f"{s['commands']} Redis commands per scrape")
        results["worker_metrics_us_per_task"] = observe_cost()
        print(f"per-worker metrics: {results['worker_metrics_us_per_task']:.2f} us of CPU per settled task")
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
