"""What the integrations cost: tracing off and on, progress reports. ``.venv/bin/python bench/integrations.py``

In one process, on a throwaway redis-server, the modes alternated per round (A B B A), so a change
of the machine's load during the run hits both alike:

* **enqueue**: ``.delay()`` of a no-op in a loop, tracing off (no tracer provider: OpenTelemetry is
  never consulted beyond one ``sys.modules`` lookup) and on (an SDK ``TracerProvider`` with a
  ``SimpleSpanProcessor`` to an ``InMemorySpanExporter``, cleared between rounds: the span's own
  cost, not an exporter's network);
* **attempt**: N queued no-ops drained by an in-process burst ``Worker`` (threads, concurrency 1),
  tracing off and on (one consumer span per attempt);
* **progress**: ``report_progress()`` in a tight loop (for ``--seconds``) inside an attempt's writer
  bound to a task the bench holds (as a worker does): microseconds per call and the Redis writes
  per second it makes; and one stored report's round trip (``progress.lua``).

Also what tracing costs when off: the lookups ``send()`` and ``process()`` make, per task.

Prints a table of medians (min-max) and writes ``bench/results/integrations-<utc time>.json``.
Needs opentelemetry-sdk (the dev dependency group).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def alternate(modes: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each mode ``rounds`` times, in the order A B, B A, A B...; the values each returned."""
    names = list(modes)
    out: dict[str, list[float]] = {name: [] for name in names}
    for i in range(rounds):
        for name in names if i % 2 == 0 else reversed(names):
            out[name].append(modes[name]())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6, help="runs of each mode (alternated)")
    ap.add_argument("-n", type=int, default=3000, help="tasks per enqueue and per drain run")
    ap.add_argument("--seconds", type=float, default=2.0, help="how long each progress run reports in a tight loop")
    args = ap.parse_args()
    sys.path[:0] = [str(BENCH.parent), str(BENCH)]
    from django_redisq.testing import RedisServer

    server = RedisServer().start()
    try:
        os.environ.update(BENCH_REDIS_URL=server.url, DJANGO_SETTINGS_MODULE="bench_settings")
        import django

        django.setup()
        results = measure(server.url, args.rounds, args.n, args.seconds)
    finally:
        server.cleanup()
    rows = [(name, unit, statistics.median(v), min(v), max(v)) for (name, unit), v in results.items()]
    width = max(len(r[0]) for r in rows)
    for name, unit, med, lo, hi in rows:
        print(f"{name:<{width}}  {med:>12,.1f} {unit:<10} ({lo:,.1f} - {hi:,.1f})")
    out = BENCH / "results" / f"integrations-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({f"{name} [{unit}]": v for (name, unit), v in results.items()}, indent=2))
    print(f"written {out.relative_to(BENCH.parent)}")
    return 0


def measure(url: str, rounds: int, n: int, seconds: float) -> dict[tuple[str, str], list[float]]:
    import redis
    from benchapp.tasks import noop
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from django_redisq import progress
    from django_redisq.core import tracing
    from django_redisq.settings.read import get_options
    from django_redisq.store.broker import Broker
    from django_redisq.worker.running.progress import ProgressWriter
    from django_redisq.worker.worker import Worker

    r = redis.Redis.from_url(url)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def traced(on: bool) -> None:
        tracing.provider_override = provider if on else None
        exporter.clear()

    def enqueue(on: bool) -> float:
        r.flushdb()
        traced(on)
        start = time.perf_counter()
        for i in range(n):
            noop.delay(i)
        return n / (time.perf_counter() - start)

    def drain(on: bool) -> float:
        r.flushdb()
        traced(False)
        for start in range(0, n, 1000):
            noop.enqueue_many([((i,), {}) for i in range(start, min(n, start + 1000))])
        traced(on)
        start = time.perf_counter()
        done = Worker(["default"], burst=True).run()
        took = time.perf_counter() - start
        assert done == n and (not on or len(exporter.get_finished_spans()) == n), (done, len(exporter.get_finished_spans()))
        return n / took

    results: dict[tuple[str, str], list[float]] = {}

    def off_check() -> float:  # what tracing costs a task when off: the two lookups, per enqueue and per attempt
        traced(False)
        start = time.perf_counter()
        for _ in range(100_000):
            tracing.send("benchapp.tasks.noop", "default")
            tracing.process("benchapp.tasks.noop", "default", "id", 1, {})
        return (time.perf_counter() - start) / 100_000 * 1e9

    results[("tracing off: send() + process() lookups", "ns/task")] = [off_check() for _ in range(rounds)]
    got = alternate({"off": lambda: enqueue(False), "on": lambda: enqueue(True)}, rounds)
    results[("enqueue .delay(), tracing off", "tasks/s")] = got["off"]
    results[("enqueue .delay(), tracing on", "tasks/s")] = got["on"]
    got = alternate({"off": lambda: drain(False), "on": lambda: drain(True)}, rounds)
    results[("drain (1 thread), tracing off", "tasks/s")] = got["off"]
    results[("drain (1 thread), tracing on", "tasks/s")] = got["on"]
    traced(False)

    # progress: a task the bench holds as worker "bench", so each stored report is a real write
    broker = Broker(get_options("default"))
    r.flushdb()
    broker.heartbeat(["default"], "bench", {})
    held = noop.delay(0)
    [delivery] = broker.fetch("default", "bench", 1)
    assert delivery.id == held.id

    def calls() -> float:
        broker.heartbeat(["default"], "bench", {})  # renews the guard's lease, as a worker's heartbeat does
        writer = ProgressWriter(lambda text: broker.progress.save("default", held.id, "bench", text), attempt=1)
        token = progress.current.set(writer)
        count = 0
        try:
            start = time.perf_counter()
            while (took := time.perf_counter() - start) < seconds:  # a tight loop reporting for `seconds`
                for _ in range(1000):
                    progress.report_progress(count, 10**12, "a row")
                    count += 1
        finally:
            progress.current.reset(token)
        results.setdefault(("progress: stored writes per second of a tight loop", "writes/s"), []).append(writer.writes / took)
        return took / count * 1e6

    def write() -> float:
        broker.heartbeat(["default"], "bench", {})
        text = progress.encode(1, 2, "a row", 1)
        start = time.perf_counter()
        for _ in range(1000):
            assert broker.progress.save("default", held.id, "bench", text)
        return (time.perf_counter() - start) / 1000 * 1e6

    results[("progress: report_progress() in a tight loop", "us/call")] = [calls() for _ in range(rounds)]
    results[("progress: one stored report (progress.lua)", "us/write")] = [write() for _ in range(rounds)]
    return results


if __name__ == "__main__":
    raise SystemExit(main())
