"""Compare two engines' no-op drain in ABBA order, so a change of the machine's load during the runs cancels to first order.

    git archive <old commit> django_redisq | tar -x -C /tmp/old
    .venv/bin/python bench/ab_drain.py /tmp/old . --concurrency 4 --rounds 4

Each drain: N no-ops queued, one ``runworker -v 0`` started, stopped once the
processed counter reaches N. Prints per engine the median rate from the first
ack to the last and the worker's CPU per task (its whole process, start-up
included, from ``wait4``), then the ratios second / first. ``bench/run.py
--engine`` runs one engine per invocation; on a shared machine whose load
drifts, that order biases the later one, which this avoids.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def drain(engine: Path, url: str, r: object, noop: object, n: int, concurrency: int) -> tuple[float, float]:
    """One drain; (tasks per second from the first ack to the last, worker CPU microseconds per task)."""
    r.flushall()  # type: ignore[attr-defined]
    for start in range(0, n, 1000):
        noop.enqueue_many([((i,), {}) for i in range(start, min(n, start + 1000))])  # type: ignore[attr-defined]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(engine), str(BENCH)]), BENCH_REDIS_URL=url,
               DJANGO_SETTINGS_MODULE="bench_settings")
    p = subprocess.Popen([sys.executable, "-m", "django", "runworker", "default", "-c", str(concurrency), "-v", "0"], env=env,
                         cwd=BENCH, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0, first, done = time.time(), None, 0
    while done < n and time.time() - t0 < 120:
        done = int(r.get("redisq:{default}:processed") or 0)  # type: ignore[attr-defined]
        if done and first is None:
            first = (time.time(), done)
        time.sleep(0.005)
    end = time.time()
    p.terminate()
    _, _, usage = os.wait4(p.pid, 0)
    if first is None or done < n:
        raise RuntimeError(f"the drain with {engine} did not finish ({done}/{n})")
    return (done - first[1]) / max(1e-6, end - first[0]), (usage.ru_utime + usage.ru_stime) / n * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("first", type=Path, help="directory holding the first engine's django_redisq package")
    ap.add_argument("second", type=Path, help="directory holding the second engine's django_redisq package")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=4, help="ABBA pairs: each engine drains this many times")
    ap.add_argument("-n", type=int, default=20_000)
    args = ap.parse_args()
    sys.path[:0] = [str(BENCH.parent), str(BENCH)]
    from django_redisq.testing import RedisServer

    server = RedisServer().start()
    try:
        import django
        import redis

        os.environ.update(BENCH_REDIS_URL=server.url, DJANGO_SETTINGS_MODULE="bench_settings")
        django.setup()
        from benchapp.tasks import noop

        r = redis.Redis(port=server.port, decode_responses=True)
        engines = {"first": args.first.resolve(), "second": args.second.resolve()}
        runs: dict[str, list[tuple[float, float]]] = {"first": [], "second": []}
        for i in range(args.rounds):
            for side in ("first", "second") if i % 2 == 0 else ("second", "first"):
                runs[side].append(drain(engines[side], server.url, r, noop, args.n, args.concurrency))
    finally:
        server.cleanup()
    med = {side: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for side, v in runs.items()}
    for side, v in runs.items():
        print(f"{side} ({engines[side]}): rate median {med[side][0]:,.0f}/s, worker CPU median {med[side][1]:.1f} us/task; runs "
              + ", ".join(f"{a:,.0f}/s {b:.1f} us" for a, b in v))
    print(f"second / first, -c {args.concurrency}, {args.rounds} rounds of {args.n:,}: rate {med['second'][0] / med['first'][0]:.3f}, "
          f"worker CPU per task {med['second'][1] / med['first'][1]:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
