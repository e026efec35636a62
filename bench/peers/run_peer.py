"""Measure one peer queue like django-redisq: single enqueue/s, drain/s of N with one worker process, idle latency.

Run by ``bench/run.py`` with the peers' virtualenv's Python::

    .peers-venv/bin/python peers/run_peer.py huey --url redis://127.0.0.1:PORT/0 --n 20000

It flushes the given Redis between runs (the bench's own throwaway server),
prints progress to stderr and its results as one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

PEERS = Path(__file__).resolve().parent
BENCH = PEERS.parent
sys.path[:0] = [str(PEERS), str(BENCH)]

import redis  # noqa: E402
from common import START_KEY, Procs, emit, group_cpu_seconds, rate_loop, redis_cpu_seconds, start_latency, tail, watch_drain  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=["dramatiq", "huey", "rq"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--n", type=int, default=20000, help="tasks queued before each drain")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cap", type=float, default=25.0, help="seconds a drain may take; then its rate so far counts")
    ap.add_argument("--lat-samples", type=int, default=200)
    ap.add_argument("--enqueue-count", type=int, default=10000)
    ap.add_argument("--enqueue-seconds", type=float, default=2.0)
    ap.add_argument("--pidfile", default=None, help="append the id of every process started here")
    ap.add_argument("--logdir", default=None)
    args = ap.parse_args()

    os.environ["BENCH_REDIS_URL"] = args.url
    peer: Any = importlib.import_module(f"{args.peer}_peer")
    r = redis.Redis.from_url(args.url, decode_responses=True)
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PEERS), str(BENCH)]), BENCH_REDIS_URL=args.url)
    logdir = Path(args.logdir or ".")
    procs = Procs()

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)

    def start_worker(tag: str) -> Any:
        p = procs.start(peer.worker_argv(bindir), env=env, cwd=PEERS, log=logdir / f"{args.peer}-{tag}.log")
        if args.pidfile:
            with open(args.pidfile, "a") as f:
                f.write(f"{p.pid}\n")
        return p

    out: dict[str, Any] = {
        "peer": args.peer, "version": metadata.version(peer.PACKAGE), "worker": peer.WORKER,
        "n": args.n, "enqueue": [], "drain": [], "latency": [],
    }
    try:
        for rep in range(args.repeats):
            r.flushall()
            res = rate_loop(peer.enqueue_noop, args.enqueue_count, args.enqueue_seconds)
            out["enqueue"].append(res)
            log(f"{args.peer} enqueue run {rep + 1}: {res['per_s']:,.0f}/s")
        for rep in range(args.repeats):
            r.flushall()
            t = time.perf_counter()
            peer.fill(args.n)
            filled = time.perf_counter() - t
            t0 = time.perf_counter()
            p = start_worker(f"drain{rep}")
            try:
                res = watch_drain(lambda: peer.done_count(r, args.n), args.n, t0, args.cap, alive=lambda p=p: p.poll() is None,
                                  cpu={"worker": lambda p=p: group_cpu_seconds([p.pid]), "redis": lambda: redis_cpu_seconds(r)})
            except RuntimeError as exc:
                log(f"{args.peer}: {exc}\n{tail(logdir / f'{args.peer}-drain{rep}.log')}")
                raise
            finally:
                procs.stop(grace=10)
            res["fill_s"] = filled
            out["drain"].append(res)
            log(f"{args.peer} drain run {rep + 1}: {res['per_s']:,.0f}/s (steady {res['steady_per_s'] or 0:,.0f}/s)"
                + (f", capped at {args.cap:.0f}s after {res['done']} tasks" if res["capped"] else ""))
        for rep in range(args.repeats):
            r.flushall()
            start_worker(f"latency{rep}")
            try:
                peer.enqueue_stamp(-1)  # ready when it has run one task
                if r.blpop([START_KEY], timeout=60) is None:
                    raise RuntimeError(f"{args.peer} worker did not run a task within 60 s")
                res = start_latency(peer.enqueue_stamp, r, START_KEY, args.lat_samples)
            finally:
                procs.stop(grace=10)
            out["latency"].append(res)
            log(f"{args.peer} latency run {rep + 1}: p50 {res.get('start_p50_ms', float('nan')):.2f} ms, "
                f"p99 {res.get('start_p99_ms', float('nan')):.2f} ms")
    finally:
        procs.stop(grace=5)
        r.flushall()
    emit(out)
    return 0


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
