#!/usr/bin/env python
"""Events throughput: ``python bench/events.py [--events 5000] [--repeats 3] [--json FILE]``.

Starts its own redis-server on a loopback port (persistence off) and measures:

* publish/s: ``events.publish`` in a loop (one script call each: the topic's groups made sure of, one XADD),
  beside ``.delay()`` of a no-op task in a loop, on the same server;
* end-to-end events/s with 1 and with 3 subscriptions: N events published first, then one ``runworker``
  process (``--concurrency 4``) started; from its first handler run (its start-up is logged apart) until every
  subscription's handler ran for every event (each run one INCR, counted): N x subscriptions tasks made by the
  pump, run and acked;
* the cost of ``LIFECYCLE_EVENTS``: ``.delay()``/s and the drain rate of one ``runworker -c 4`` (no-op tasks,
  from its first ack) with the option off and on (nobody subscribed: publishing alone, 3 XADDs a task).

Each measurement is repeated; the median, min and max are printed. Every process is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (str(ROOT), str(ROOT / "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

from common import Procs  # noqa: E402

from django_redisq.testing import RedisServer  # noqa: E402

HANDLER = "tests.testapp.event_tasks.tally"
SUBS = {n: {f"sub-{i}": {"topic": "bench.events", "task": HANDLER} for i in range(n)} for n in (1, 3)}


def log(msg: str) -> None:
    print(f"[events {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def setup(url: str) -> None:
    os.environ.update(DJANGO_SETTINGS_MODULE="tests.worker_settings", REDISQ_TEST_REDIS_URL=url,
                      REDISQ_SUBSCRIPTIONS=json.dumps(SUBS[3]))
    import django

    django.setup()


def settings_for(n_subs: int, lifecycle: bool = False) -> Any:
    import copy

    from django.conf import settings
    from django.test import override_settings

    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["OPTIONS"]["SUBSCRIPTIONS"] = SUBS[n_subs]
    tasks["default"]["OPTIONS"]["LIFECYCLE_EVENTS"] = lifecycle
    return override_settings(TASKS=tasks)


def lifecycle_cost(n: int, lifecycle: bool, url: str, c: Any) -> tuple[float, float]:
    """(.delay()/s, drain runs/s of one runworker -c 4 from its first ack) with LIFECYCLE_EVENTS off or on (nobody
    subscribed to redisq.tasks: the cost of publishing alone)."""
    from tests.testapp.tasks import noop

    c.flushall()
    with settings_for(1, lifecycle):
        t0 = time.perf_counter()
        for i in range(n):
            noop.delay(i)
        enqueue = n / (time.perf_counter() - t0)
    env = {**os.environ, "REDISQ_SUBSCRIPTIONS": json.dumps(SUBS[1]), "REDISQ_TEST_REDIS_URL": url,
           "REDISQ_LIFECYCLE_EVENTS": "1" if lifecycle else "", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = Procs()
    procs.start([sys.executable, "-m", "django", "runworker", "default", "-c", "4", "-v", "0"], cwd=ROOT, env=env)
    key = "redisq:{default}:processed"
    try:
        deadline = time.monotonic() + 300
        while not c.get(key) and time.monotonic() < deadline:
            time.sleep(0.005)
        first, start = int(c.get(key) or 0), time.perf_counter()
        while int(c.get(key) or 0) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        drain = (int(c.get(key) or 0) - first) / (time.perf_counter() - start)
    finally:
        procs.stop(grace=30)
    if lifecycle and c.xlen("redisq:{topic:redisq.tasks}:stream") < 3 * n:
        raise SystemExit("lifecycle events missing: fewer than 3 per task")
    return enqueue, drain


def publish_rate(n: int, n_subs: int, c: Any) -> float:
    from django_redisq.events.publish import publish

    c.flushall()
    with settings_for(n_subs):
        t0 = time.perf_counter()
        for i in range(n):
            publish("bench.events", {"n": i})
        return n / (time.perf_counter() - t0)


def delay_rate(n: int, c: Any) -> float:
    from tests.testapp.tasks import noop

    c.flushall()
    t0 = time.perf_counter()
    for i in range(n):
        noop.delay(i)
    return n / (time.perf_counter() - t0)


def end_to_end(n: int, n_subs: int, url: str, c: Any) -> float:
    from django_redisq.events.publish import publish

    c.flushall()
    with settings_for(n_subs):
        for i in range(n):
            publish("bench.events", {"n": i})
    env = {**os.environ, "REDISQ_SUBSCRIPTIONS": json.dumps(SUBS[n_subs]), "REDISQ_TEST_REDIS_URL": url,
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    want = n * n_subs
    t0 = time.perf_counter()
    procs = Procs()
    procs.start([sys.executable, "-m", "django", "runworker", "default", "-c", "4", "-v", "0"], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 300
        while not c.get("events:tally") and time.monotonic() < deadline:
            time.sleep(0.005)
        first = time.perf_counter()  # the worker has started (imports, registration): measure from its first run
        while int(c.get("events:tally") or 0) < want and time.monotonic() < deadline:
            time.sleep(0.01)
        elapsed = time.perf_counter() - first
        log(f"{n_subs} subscription(s): worker start to first run {first - t0:.2f} s")
        done = int(c.get("events:tally") or 0)
    finally:
        procs.stop(grace=30)
    if done < want:
        raise SystemExit(f"only {done} of {want} handler runs within 300 s")
    return want / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import redis

    with RedisServer() as server:
        setup(server.url)
        c = redis.Redis.from_url(server.url, decode_responses=True)
        rows: dict[str, list[float]] = {}
        for _ in range(args.repeats):
            rows.setdefault(".delay()/s (no-op task)", []).append(delay_rate(args.events, c))
            rows.setdefault("publish/s (1 subscription)", []).append(publish_rate(args.events, 1, c))
            rows.setdefault("publish/s (3 subscriptions)", []).append(publish_rate(args.events, 3, c))
            for n_subs in (1, 3):
                rows.setdefault(f"end-to-end handler runs/s ({n_subs} subscription{'s' * (n_subs > 1)}, -c 4)", []).append(
                    end_to_end(args.events, n_subs, server.url, c))
            for on in (False, True):
                enqueue, drain = lifecycle_cost(args.events, on, server.url, c)
                rows.setdefault(f".delay()/s, LIFECYCLE_EVENTS {'on' if on else 'off'}", []).append(enqueue)
                rows.setdefault(f"drain runs/s (-c 4), LIFECYCLE_EVENTS {'on' if on else 'off'}", []).append(drain)
            log("repeat done")
    width = max(map(len, rows))
    print(f"{'measurement':<{width}}  {'median':>10}  {'min':>10}  {'max':>10}")
    for label, values in rows.items():
        print(f"{label:<{width}}  {statistics.median(values):>10,.0f}  {min(values):>10,.0f}  {max(values):>10,.0f}")
    if args.json:
        args.json.write_text(json.dumps({"events": args.events, "results": rows}, indent=2))


if __name__ == "__main__":
    main()
