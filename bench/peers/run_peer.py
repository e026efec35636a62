"""Measure one peer queue like django-redisq: enqueue/s, drains of N queued tasks, idle latency.

Run by ``bench/run.py`` with the peer's virtualenv's Python::

    .peers-venv/bin/python peers/run_peer.py huey --url redis://127.0.0.1:PORT/0 --plan '{"repeats": 1, ...}'

The plan (JSON): ``repeats``; ``enqueue`` {``kinds``, ``count``, ``seconds``}; ``drains``, a list of
{``tag``, ``kind`` (noop, rpush, sleep), ``conc`` (null: the peer's default), ``procs`` (worker processes),
``n``, ``cap`` (seconds; then the rate so far counts)}; ``latency`` {``samples``}; ``cost`` {``n``, ``cap``}: what a task
costs the Redis server (``common.task_cost``: enqueue ``n`` one by one, then the peer's default worker drains them),
with results stored or not as ``BENCH_RESULTS`` (on / off / its default) sets in the peer's module. A drain the peer's worker
cannot run (e.g. a concurrency it does not have) is listed as not supported; one that fails is listed
with its error, and the others go on. It flushes the given Redis between runs (the bench's own throwaway
server), prints progress to stderr and its results as one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import importlib
import json
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
from common import START_KEY, CostMeter, Procs, cost_client, emit, group_cpu_seconds, rate_loop, redis_cpu_seconds, start_latency, tail, task_cost, watch_drain  # noqa: E402

MODULES = {"dramatiq": "dramatiq_peer", "huey": "huey_peer", "rq": "rq_peer", "celery": "celery_peer", "arq": "arq_peer",
           "vtasks": "vtasks_peer", "tasks-redis": "tasks_redis_peer"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=sorted(MODULES))
    ap.add_argument("--url", required=True)
    ap.add_argument("--plan", required=True, help="what to measure, as JSON (see the docstring)")
    ap.add_argument("--pidfile", default=None, help="append the id of every process started here")
    ap.add_argument("--logdir", default=None)
    args = ap.parse_args()
    plan = json.loads(args.plan)

    os.environ["BENCH_REDIS_URL"] = args.url
    peer: Any = importlib.import_module(MODULES[args.peer])
    r = redis.Redis.from_url(args.url, decode_responses=True)
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PEERS), str(BENCH)]), BENCH_REDIS_URL=args.url)
    logdir = Path(args.logdir or ".")
    procs = Procs()

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)

    def start_workers(tag: str, conc: int | None, count: int) -> list[Any]:
        ps = []
        for i in range(count):
            argv = peer.worker_argv(bindir, conc, i)
            p = procs.start(argv, env=env, cwd=PEERS, log=logdir / f"{args.peer}-{tag}-{i}.log")
            if args.pidfile:
                with open(args.pidfile, "a") as f:
                    f.write(f"{p.pid}\n")
            ps.append(p)
        return ps

    repeats = int(plan.get("repeats", 1))
    out: dict[str, Any] = {"peer": args.peer, "version": metadata.version(peer.PACKAGE), "worker": peer.WORKER,
                           "enqueue": {}, "drain": {}, "drain_meta": {}, "latency": []}
    try:
        cost = plan.get("cost")
        if cost:
            out["results_stored"] = bool(getattr(peer, "RESULTS", None))
            out["results_switch"] = bool(getattr(peer, "RESULTS_SWITCH", False))
            rc = cost_client(args.url)
            ps: list[Any] = []

            def start() -> None:
                ps[:] = start_workers("cost", None, 1)

            out["cost"] = task_cost(CostMeter(rc), enqueue=lambda i: peer.enqueue("noop", i), n=int(cost["n"]),
                                    start=start, stop=lambda: procs.stop(grace=10),
                                    done=lambda: peer.done_count(rc, int(cost["n"])), reset=rc.flushall,
                                    cap=float(cost["cap"]), alive=lambda: all(p.poll() is None for p in ps))
            log(f"{args.peer} redis cost (results {'on' if out['results_stored'] else 'off'}): "
                f"{out['cost']['stats']['enqueue']['cpu_us'] + out['cost']['stats']['drain']['cpu_us']:.1f} us server CPU per task")
        enq = plan.get("enqueue") or {}
        for rep in range(repeats):
            for kind in enq.get("kinds", ()):
                r.flushall()
                res = rate_loop(lambda i, kind=kind: peer.enqueue(kind, i), enq["count"], enq["seconds"])
                out["enqueue"].setdefault(kind, []).append(res)
                log(f"{args.peer} enqueue {kind} run {rep + 1}: {res['per_s']:,.0f}/s")
        for rep in range(repeats):
            for d in plan.get("drains", ()):
                tag, kind, conc, nproc, n = d["tag"], d["kind"], d.get("conc"), int(d.get("procs", 1)), int(d["n"])
                meta = out["drain_meta"].setdefault(tag, {**d, "desc": peer.worker_desc(conc), "supported": True})
                if peer.worker_argv(bindir, conc, 0) is None:
                    meta["supported"] = False
                    continue
                r.flushall()
                t = time.perf_counter()
                peer.fill(kind, n)
                filled = time.perf_counter() - t
                t0 = time.perf_counter()
                ps = start_workers(f"{tag}-{rep}", conc, nproc)
                try:
                    res = watch_drain(lambda n=n: peer.done_count(r, n), n, t0, float(d["cap"]),
                                      alive=lambda ps=ps: all(p.poll() is None for p in ps),
                                      cpu={"worker": lambda ps=ps: group_cpu_seconds([p.pid for p in ps]),
                                           "redis": lambda: redis_cpu_seconds(r)})
                except RuntimeError as exc:
                    log(f"{args.peer} drain {tag}: {exc}\n{tail(logdir / f'{args.peer}-{tag}-{rep}-0.log')}")
                    meta["error"] = str(exc)
                    continue
                finally:
                    procs.stop(grace=10)
                res["fill_s"] = filled
                out["drain"].setdefault(tag, []).append(res)
                log(f"{args.peer} drain {tag} run {rep + 1}: {res['per_s']:,.0f}/s (first to last completion "
                    f"{res['active_per_s'] or 0:,.0f}/s, first after {res['startup_s'] or 0:.2f}s)"
                    + (f", capped at {d['cap']:.0f}s after {res['done']} tasks" if res["capped"] else ""))
        lat = plan.get("latency")
        for rep in range(repeats if lat else 0):
            r.flushall()
            start_workers(f"latency{rep}", None, 1)
            try:
                peer.enqueue("stamp", -1)  # ready when it has run one task
                if r.blpop([START_KEY], timeout=60) is None:
                    raise RuntimeError(f"{args.peer} worker did not run a task within 60 s")
                res = start_latency(lambda i: peer.enqueue("stamp", i), r, START_KEY, int(lat["samples"]))
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
