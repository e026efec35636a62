#!/usr/bin/env python
"""Workflows: ``python bench/workflows.py [--repeats 5] [--json FILE]``.

On a redis-server of its own (loopback port, persistence off), with the bench
app's no-op task, it measures:

* enqueue of a 10-step chain and of a 1,000-member chord (ms each: the
  workflow's bookkeeping in its slot, then its first steps queued);
* drain of that chord by one in-process worker (concurrency 8): start to the
  workflow's success, and per member;
* the per-member cost of completion at 10 and at 10,000 members: the step a
  worker takes before a member's ack (``wf_done.lua``, plus the release of the
  callback by the last member), timed per call and in Redis commands per
  member (``INFO commandstats``). Constant cost means the two figures stay
  within noise of each other; a scan of the members would grow 1,000-fold.

Prints a table of median/min/max and, with ``--json``, writes the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))


def commands(r: Any) -> int:
    return sum(int(v["calls"]) for v in r.info("commandstats").values())


def median_row(name: str, values: list[float], unit: str) -> dict[str, Any]:
    return {"name": name, "unit": unit, "median": statistics.median(values), "min": min(values), "max": max(values), "runs": values}


def timed(f: Callable[[], Any]) -> float:
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    from django_redisq.testing import RedisServer

    with RedisServer() as srv:
        os.environ["BENCH_REDIS_URL"] = srv.url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench_settings")
        import django

        django.setup()
        import redis
        from benchapp.tasks import noop
        from django.tasks import task_backends

        from django_redisq import chain, chord
        from django_redisq.store.workflows import WorkflowStore
        from django_redisq.worker.worker import Worker
        from django_redisq.workflows.engine import WorkflowEngine

        r = redis.Redis.from_url(srv.url, decode_responses=True)
        backend: Any = task_backends["default"]
        rows = []

        chain_ms = [timed(lambda: chain(*([noop.s(1)] + [noop.s()] * 9)).enqueue()) * 1000 for _ in range(args.repeats)]
        rows.append(median_row("enqueue a 10-step chain", chain_ms, "ms"))
        r.flushall()

        enqueue_ms, drain_s, per_member_ms = [], [], []
        for _ in range(args.repeats):
            r.flushall()
            start = time.perf_counter()
            wf = chord([noop.s(i) for i in range(1000)], noop.s()).enqueue()
            enqueue_ms.append((time.perf_counter() - start) * 1000)
            worker = Worker(["default"], burst=False, concurrency=8)
            thread = threading.Thread(target=worker.run, daemon=True)
            start = time.perf_counter()
            thread.start()
            while wf.refresh().status.name != "SUCCESSFUL":
                time.sleep(0.01)
            took = time.perf_counter() - start
            worker.request_stop()
            thread.join(30)
            drain_s.append(took)
            per_member_ms.append(took / 1001 * 1000)
        rows.append(median_row("enqueue a 1,000-member chord", enqueue_ms, "ms"))
        rows.append(median_row("drain the 1,000-member chord (8 threads)", drain_s, "s"))
        rows.append(median_row("  per step", per_member_ms, "ms"))

        store = WorkflowStore(backend.broker)
        engine = WorkflowEngine(store)
        for n in (10, 10_000):
            us, cmds = [], []
            for _ in range(args.repeats):
                r.flushall()
                wf = chord([noop.s(i) for i in range(n)], noop.s()).enqueue()
                before = commands(r)
                start = time.perf_counter()
                for i in range(n):
                    reply = store.done(wf.id, i, str(i))
                    engine.release(wf.id, reply.released)
                us.append((time.perf_counter() - start) / n * 1e6)
                cmds.append((commands(r) - before) / n)
                assert reply.released and reply.released[0].inputs == list(range(n))
            rows.append(median_row(f"completion per member, {n:,} members", us, "us"))
            rows.append(median_row(f"  Redis commands per member, {n:,} members", cmds, "cmds"))

        width = max(len(row["name"]) for row in rows)
        print(f"{'':{width}}  {'median':>10} {'min':>10} {'max':>10}")
        for row in rows:
            print(f"{row['name']:{width}}  {row['median']:>10.3f} {row['min']:>10.3f} {row['max']:>10.3f}  {row['unit']}")
        if args.json:
            Path(args.json).write_text(json.dumps({"rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
