#!/usr/bin/env python
"""django-redisq benchmark: ``python bench/run.py`` (``make bench``), ``--quick`` for a short run.

Starts its own redis-server on a loopback port (persistence off), and measures,
with a no-op task through the public API and the real ``runworker`` process:

* limits: ``redis-benchmark -c 1 -t lpush,rpop`` at ``-P 1`` and ``-P 16``, and a
  bare redis-py LPUSH loop (RESP2 and RESP3) on the same server;
* enqueue/s: ``.delay()`` in a loop, and bulk ``enqueue_many``;
* aenqueue/s on a running event loop (one by one, and N at once with ``gather``) against ``enqueue`` in
  a thread and Django's default ``aenqueue`` (a thread hop), then the same for the other Django Tasks
  backends on Redis (django-vtasks, django-tasks-redis) in ``bench/.django-peers-venv``;
* durable: ``.delay()`` on a master with one replica (started by the bench), without and with
  ``DURABLE_REPLICAS: 1`` (each enqueue then waits for the replica's WAIT);
* drain/s of N queued tasks, worker start to last ack: one process at
  concurrency 1, one at a higher concurrency, two processes; with Redis
  commands and round trips per task from ``INFO commandstats`` / ``INFO stats``;
* latency enqueue->start and enqueue->ack on an idle worker, one queue and three;
* pools: drain/s and idle latency of each execution pool (``--pool threads``,
  ``processes``, ``asyncio``) with a no-op, an ``async def`` awaiting
  ``asyncio.sleep(0.01)`` and a ~5 ms pure-Python loop, and the CPU-bound
  ratio processes / threads;
* flatness: per-task cost of enqueue, fetch and ack with few and many waiting,
  and Redis bytes per pending task;
* worker resident memory after few and many tasks;
* peers: Dramatiq, Huey and RQ measured the same way, in ``bench/.peers-venv``.
* redis-cost: what one task costs the Redis server, for us and every peer in the same run: server CPU us,
  command us and commands per task, for enqueue and for fetch+run+settle, with results stored and not
  (where the queue has that switch), and the commands that cost most;
* cpu-bound: N tasks of ~12 ms of pure Python, ``-c 2``, from worker start to the last completion, thread pool
  against process pool in A B B A order, and when each child ran its first task (how soon children are ready);
* partitions (only with ``--only partitions``, not in a default run): ``.delay()``, ``enqueue_many`` and
  drain/s of one logical queue with ``PARTITIONS`` 1, 2, 4 and 8 on the same single redis-server (one
  worker per run, N tasks queued first).

Each measurement is repeated (``--repeats``); a table of median/min/max is
printed and everything is written to ``bench/results/<time>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def _engine_dir(argv: Sequence[str]) -> Path:
    """Where ``django_redisq`` is imported from: ``--engine DIR`` (e.g. an exported older commit), else this repo."""
    for i, a in enumerate(argv):
        if a == "--engine" and i + 1 < len(argv):
            return Path(argv[i + 1]).resolve()
        if a.startswith("--engine="):
            return Path(a.split("=", 1)[1]).resolve()
    return Path(os.environ.get("BENCH_ENGINE") or ROOT).resolve()


ENGINE = _engine_dir(sys.argv[1:])
for _p in (str(ENGINE), str(BENCH)):
    if _p in sys.path:
        sys.path.remove(_p)
    sys.path.insert(0, _p)

import redis  # noqa: E402
from common import (  # noqa: E402
    OWN_COMMANDS,
    START_KEY,
    CostMeter,
    Procs,
    cost_client,
    enqueue_modes,
    group_cpu_seconds,
    percentile,
    rate_loop,
    redis_cpu_seconds,
    start_latency,
    summary,
    tail,
    task_cost,
    vmrss_kb,
    watch_drain,
)

OURS_VENV = BENCH / ".ours-venv"
"""Where our runworker processes run: our runtime dependencies alone, as each peer runs in a virtualenv of its own.
The development environment the bench itself runs in also holds the OpenTelemetry SDK, which redis-py imports
at start when it is installed (about 35 ms of a worker's start), and tools no deployment has."""
OURS_RUNTIME = ("Django", "django-tasks", "redis", "hiredis", "cronsim", "prometheus-client")
"""The distributions of our runtime and the metrics extra; pinned to the versions the bench's environment has."""
PEERS_VENV = BENCH / ".peers-venv"
PEER_PACKAGES = ["dramatiq[redis]==2.2.1", "huey==3.5.4", "rq==2.12.0", "hiredis"]
PEER_NAMES = ("dramatiq", "huey", "rq", "celery", "arq", "vtasks", "tasks-redis")
PEER_LABELS = {"dramatiq": "Dramatiq", "huey": "Huey", "rq": "RQ", "celery": "Celery", "arq": "arq", "vtasks": "django-vtasks",
               "tasks-redis": "django-tasks-redis"}
OWN_VENV_PEERS = {
    # peers whose pins conflict with the others' (arq and Celery want an older redis-py): a virtualenv each
    "celery": (BENCH / ".celery-venv", ["celery[redis]==5.7.0", "hiredis"]),
    "arq": (BENCH / ".arq-venv", ["arq==0.28.0", "hiredis"]),
}
SECTIONS = ("limits", "enqueue", "aenqueue", "durable", "drain", "flow", "latency", "hoarding", "pools", "flatness", "rss", "peers",
            "redis-cost", "cpu-bound")
OPT_IN_SECTIONS = ("partitions",)
"""Sections a default run leaves out: name them in ``--only``."""
PARTITION_COUNTS = (1, 2, 4, 8)
DJANGO_PEERS_VENV = BENCH / ".django-peers-venv"
DJANGO_PEER_PACKAGES = {"vtasks": "django-vtasks[valkey]==3.2.0", "tasks-redis": "django-tasks-redis==0.4.0"}
"""The other Django Tasks backends on Redis, measured by the aenqueue section in their own virtualenv (with Django 6)."""
POOL_NAMES = ("threads", "processes", "asyncio")

PROFILES: dict[str, dict[str, Any]] = {
    # make bench: about 10 minutes on 2 cores, and the pools section about 11 more
    "full": {
        "repeats": 3, "drain_n": 20_000, "drain_cap": 120.0, "concurrency": 4,
        "delay_count": 20_000, "delay_s": 3.0, "many_count": 50_000, "many_batch": 1000, "many_s": 4.0,
        "lat_samples": 400, "flat_small": 1000, "flat_big": 1_000_000, "flat_ops": 2000,
        "rss_small": 1000, "rss_big": 100_000, "bare_count": 50_000, "bare_s": 2.0, "rb_n": 50_000,
        "peer_n": 20_000, "peer_cap": 20.0, "peer_lat": 200, "peer_enqueue": 10_000, "peer_enqueue_s": 2.0,
        "pool_noop_n": 10_000, "pool_io_n": 3000, "pool_cpu_n": 1500, "pool_lat": 300,
        "async_count": 10_000, "async_s": 2.0, "async_concurrency": 50, "durable_count": 5000, "durable_s": 1.5,
        "real_n": 10_000, "sleep_n": 3000, "peer_real_n": 10_000, "peer_real_cap": 15.0, "peer_sleep_n": 3000,
        "partition_n": 20_000, "cost_n": 5000, "cost_cap": 90.0, "cpub_n": 300, "cpub_ms": 12.0, "cpub_repeats": 3,
    },
    # --quick: under 2 minutes, and the pools section about 1.5 more
    "quick": {
        "repeats": 1, "drain_n": 5000, "drain_cap": 60.0, "concurrency": 4,
        "delay_count": 5000, "delay_s": 1.5, "many_count": 20_000, "many_batch": 1000, "many_s": 2.0,
        "lat_samples": 150, "flat_small": 1000, "flat_big": 100_000, "flat_ops": 1000,
        "rss_small": 1000, "rss_big": 10_000, "bare_count": 20_000, "bare_s": 1.0, "rb_n": 20_000,
        "peer_n": 2000, "peer_cap": 8.0, "peer_lat": 100, "peer_enqueue": 3000, "peer_enqueue_s": 1.0,
        "pool_noop_n": 3000, "pool_io_n": 1000, "pool_cpu_n": 500, "pool_lat": 100,
        "async_count": 3000, "async_s": 1.0, "async_concurrency": 50, "durable_count": 3000, "durable_s": 1.0,
        "real_n": 3000, "sleep_n": 1000, "peer_real_n": 3000, "peer_real_cap": 8.0, "peer_sleep_n": 1000,
        "partition_n": 4000, "cost_n": 2000, "cost_cap": 60.0, "cpub_n": 300, "cpub_ms": 12.0, "cpub_repeats": 2,
    },
}

# the drain matrix (issue 14): task kinds x logging x worker shapes, for django-redisq and the peers
KINDS = {"noop": "no-op", "rpush": "one Redis round trip (RPUSH)", "sleep": "time.sleep(0.001)"}
LOGGINGS = {"none": "no LOGGING", "console": "console LOGGING"}
DRAIN_SHAPES: tuple[tuple[str, int, int], ...] = (("c1", 1, 1), ("c2", 2, 1), ("c4", 4, 1), ("c8", 8, 1), ("p2", 1, 2))
SHAPE_LABELS = {"c1": "1 process -c 1", "c2": "1 process -c 2", "c4": "1 process -c 4", "c8": "1 process -c 8", "p2": "2 processes -c 1"}
PEER_SLEEP_SHAPES = ("c1", "c4")  # the peers' 1 ms sleep drains

# the pools section: (workload, pool, --concurrency), in this order; the workloads are benchapp.tasks noop, io_sleep
# and cpu. The two drains of the CPU-bound ratio run twice, A B B A, so a change of the machine's load during
# the four cancels out to first order (other jobs share these 2 cores)
POOL_RUNS: tuple[tuple[str, str, int], ...] = (
    ("noop", "threads", 4), ("noop", "processes", 2), ("noop", "asyncio", 4),
    ("io", "threads", 8), ("io", "processes", 2), ("io", "asyncio", 100),
    ("cpu", "threads", 2), ("cpu", "threads", 4), ("cpu", "processes", 2), ("cpu", "processes", 2), ("cpu", "threads", 4),
    ("cpu", "asyncio", 4),
)
# idle latency per pool: (pool, --concurrency, task); the asyncio pool with a sync task and an async def one
POOL_LATENCY: tuple[tuple[str, int, str], ...] = (
    ("threads", 4, "stamp"), ("processes", 2, "stamp"), ("asyncio", 100, "stamp"), ("asyncio", 100, "astamp"),
)
WORKLOADS = {"noop": "no-op", "io": "async sleep 10 ms", "cpu": "CPU ~5 ms"}

FLAT_WORKER = "bench-flat"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# -- the table ---------------------------------------------------------------


class Results:
    """Named measurements, each a list of per-run values."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.details: dict[str, Any] = {}

    def add(self, key: str, label: str, unit: str, value: float | None, note: str = "") -> None:
        row = self.rows.setdefault(key, {"label": label, "unit": unit, "values": [], "note": note})
        if value is not None:
            row["values"].append(float(value))
        if note:
            row["note"] = note

    def median(self, key: str) -> float | None:
        row = self.rows.get(key)
        return summary(row["values"])["median"] if row else None

    def as_json(self) -> dict[str, Any]:
        return {k: {**{kk: vv for kk, vv in v.items() if kk != "values"}, **summary(v["values"])} for k, v in self.rows.items()}


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def table(res: Results) -> str:
    head = ("measurement", "unit", "median", "min", "max", "runs")
    lines = []
    for row in res.rows.values():
        s = summary(row["values"])
        lines.append((row["label"], row["unit"], fmt(s["median"]), fmt(s["min"]), fmt(s["max"]), str(len(s["runs"]))))
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    out = ["  ".join(h.ljust(widths[i]) if i < 2 else h.rjust(widths[i]) for i, h in enumerate(head))]
    out.append("  ".join("-" * w for w in widths))
    for ln in lines:
        out.append("  ".join(c.ljust(widths[i]) if i < 2 else c.rjust(widths[i]) for i, c in enumerate(ln)))
    return "\n".join(out)


# -- the bench ---------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, cfg: dict[str, Any]) -> None:
        from django_redisq.testing import RedisServer

        self.args, self.cfg = args, cfg
        compile_engine()
        self.res = Results()
        self.procs = Procs()
        self.logdir = Path(tempfile.mkdtemp(prefix="redisq-bench-"))
        self.worker_python = ours_python()
        self.server = RedisServer().start()
        self.url = self.server.url
        self.r = redis.Redis(host="127.0.0.1", port=self.server.port, decode_responses=True, protocol=2)
        for setting in args.redis_config or ():  # the server's tuning, the same for every queue measured
            name, sep, value = setting.partition("=")
            if not sep:
                raise SystemExit(f"--redis-config wants NAME=VALUE, not {setting!r}")
            self.r.config_set(name, value)
        os.environ["BENCH_REDIS_URL"] = self.url
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench_settings"
        import django

        django.setup()
        from benchapp.tasks import astamp, cpu, io_sleep, noop, rpush, sleep_io, stamp
        from django.tasks import task_backends

        try:
            from django_redisq.store.keys import QueueKeys
        except ImportError:  # an --engine from before the package had layers
            from django_redisq.keys import QueueKeys  # type: ignore[no-redef]

        self.noop, self.stamp = noop, stamp
        self.workloads: dict[str, Any] = {"noop": noop, "io": io_sleep, "cpu": cpu, "stamp": stamp, "astamp": astamp,
                                          "rpush": rpush, "sleep": sleep_io}
        self.backend: Any = task_backends["default"]
        self.keys = QueueKeys
        self.env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(BENCH), str(ENGINE), *filter(None, [os.environ.get("PYTHONPATH")])]),
            BENCH_REDIS_URL=self.url, DJANGO_SETTINGS_MODULE="bench_settings", BENCH_ENGINE=str(ENGINE),
        )

    def close(self) -> None:
        self.procs.stop(grace=5)
        self.server.cleanup()
        shutil.rmtree(self.logdir, ignore_errors=True)

    # -- helpers ---------------------------------------------------------

    def key(self, queue: str, what: str) -> str:
        k = self.keys(queue)
        return k.counter("processed") if what == "processed" else getattr(k, what)

    def processed(self, queue: str = "default") -> int:
        return int(self.r.get(self.key(queue, "processed")) or 0)

    def fill(self, n: int, queue: str = "default", producers: int = 1, backend: str = "default", task: Any = None) -> float:
        """Queue ``n`` no-op tasks (or of ``task``, from this process) with ``enqueue_many`` (batches of 1000); seconds taken."""
        t = time.perf_counter()
        if task is not None:
            fill_local(task, n, queue, backend)
        elif producers > 1 and n >= 20_000:
            share = [n // producers + (1 if i < n % producers else 0) for i in range(producers)]
            ps = [subprocess.Popen([sys.executable, str(Path(__file__)), "--fill-only", str(k), "--fill-queue", queue,
                                    "--fill-backend", backend], env=self.env, cwd=BENCH, start_new_session=True) for k in share]
            self.procs.procs.extend(ps)
            for p in ps:
                if p.wait(600) != 0:
                    raise RuntimeError("a fill process failed")
            self.procs.stop(ps)
        else:
            fill_local(self.noop, n, queue, backend)
        return time.perf_counter() - t

    def worker_argv(self, queues: Sequence[str], concurrency: int = 1, verbosity: int | None = None,
                    pool: str | None = None) -> list[str]:
        if self.args.worker_queues and tuple(queues) == ("default",):  # e.g. --worker-queues "default:3 low:1" (weighted)
            queues = self.args.worker_queues.split()
        argv = [str(self.worker_python), "-m", "django", "runworker", *queues, "--concurrency", str(concurrency)]
        if pool is not None:  # without it, the worker's default (and an --engine older than the pools works)
            argv += ["--pool", pool]
        v = self.args.worker_verbosity if verbosity is None else verbosity
        if v is not None:
            argv += ["-v", str(v)]
        for extra in self.args.worker_arg or ():  # e.g. --worker-arg=--metrics-port=0
            argv += extra.split()
        return argv

    def start_worker(self, tag: str, queues: Sequence[str] = ("default",), concurrency: int = 1,
                     pool: str | None = None, logging: str | None = None) -> subprocess.Popen[bytes]:
        """A ``runworker``; ``logging`` "console" or "none" sets BENCH_LOGGING (bench_settings), else the environment's."""
        env = self.env if logging is None else dict(self.env, BENCH_LOGGING=logging)
        return self.procs.start(self.worker_argv(queues, concurrency, pool=pool), env=env, cwd=BENCH,
                                log=self.logdir / f"{tag}.log")

    def server_stats(self) -> dict[str, float]:
        cs = self.r.info("commandstats")
        st = self.r.info("stats")
        return {
            "all_calls": sum(v["calls"] for v in cs.values()),
            "scripts": sum(v["calls"] for k, v in cs.items() if k.startswith(("cmdstat_eval", "cmdstat_fcall"))),
            "reads": st["total_reads_processed"],
            "net_in": st["total_net_input_bytes"], "net_out": st["total_net_output_bytes"],
            **{f"cmd:{k[len('cmdstat_'):]}": v["calls"] for k, v in cs.items()},
        }

    # -- limits ----------------------------------------------------------

    def limits(self) -> None:
        binary = shutil.which("redis-benchmark")
        for rep in range(self.cfg["repeats"]):
            if binary is None:
                if rep == 0:
                    log("redis-benchmark not found (apt-get install -y redis-tools): skipped")
            else:
                for pipe in (1, 16):
                    argv = [binary, "-h", "127.0.0.1", "-p", str(self.server.port), "-c", "1", "-P", str(pipe),
                            "-n", str(self.cfg["rb_n"]), "-t", "lpush,rpop", "--csv"]
                    out = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=True).stdout
                    for line in out.splitlines():
                        cells = [c.strip('"') for c in line.split(",")]
                        if len(cells) > 1 and cells[0] in ("LPUSH", "RPOP"):
                            self.res.add(f"rb_{cells[0].lower()}_p{pipe}", f"redis-benchmark -c 1 -P {pipe} {cells[0]}",
                                         "cmd/s", float(cells[1]))
                    self.r.delete("mylist")
            for proto in (2, 3):
                c = redis.Redis(host="127.0.0.1", port=self.server.port, protocol=proto)
                c.ping()
                with contextlib.suppress(Exception):
                    conn = c.connection_pool.get_connection()
                    self.res.details[f"redis_py_parser_resp{proto}"] = type(conn._parser).__name__
                    c.connection_pool.release(conn)
                out = rate_loop(lambda i, c=c: c.lpush("bench:bare", i), self.cfg["bare_count"], self.cfg["bare_s"])
                self.res.add(f"bare_lpush_resp{proto}", f"redis-py LPUSH loop, RESP{proto}", "calls/s", out["per_s"])
                c.delete("bench:bare")
                c.close()
            log(f"limits run {rep + 1} done")

    # -- enqueue ---------------------------------------------------------

    def enqueue(self) -> None:
        cfg = self.cfg
        for rep in range(cfg["repeats"]):
            self.r.flushall()
            c0, r0 = time.process_time(), redis_cpu_seconds(self.r)
            out = rate_loop(lambda i: self.noop.delay(i), cfg["delay_count"], cfg["delay_s"])
            c1, r1 = time.process_time(), redis_cpu_seconds(self.r)
            self.res.add("delay", ".delay() loop", "tasks/s", out["per_s"])
            self.res.add("delay_cpu", "  producer CPU per .delay()", "us", (c1 - c0) / out["calls"] * 1e6)
            self.res.add("delay_rcpu", "  Redis CPU per .delay()", "us", (r1 - r0) / out["calls"] * 1e6)
            self.r.flushall()
            out = rate_loop(lambda i, rp=self.workloads["rpush"]: rp.delay(i), cfg["delay_count"], cfg["delay_s"])
            self.res.add("delay_rpush", ".delay() loop, the round-trip task", "tasks/s", out["per_s"])
            self.r.flushall()
            batch, done = cfg["many_batch"], 0
            c0, r0 = time.process_time(), redis_cpu_seconds(self.r)
            t = time.perf_counter()
            while done < cfg["many_count"] and time.perf_counter() - t < cfg["many_s"]:
                self.noop.enqueue_many([((i,), {}) for i in range(done, done + batch)])
                done += batch
            self.res.add("enqueue_many", f"enqueue_many (batches of {batch})", "tasks/s", done / (time.perf_counter() - t))
            c1, r1 = time.process_time(), redis_cpu_seconds(self.r)
            self.res.add("many_cpu", "  producer CPU per task, enqueue_many", "us", (c1 - c0) / done * 1e6)
            self.res.add("many_rcpu", "  Redis CPU per task, enqueue_many", "us", (r1 - r0) / done * 1e6)
            log(f"enqueue run {rep + 1}: delay {fmt(out['per_s'])}/s, enqueue_many {fmt(self.res.rows['enqueue_many']['values'][-1])}/s")
        self.r.flushall()

    # -- durable ---------------------------------------------------------

    def durable(self) -> None:
        """``.delay()`` on a master with one replica, without and with DURABLE_REPLICAS=1; skipped without a replica."""
        import copy

        from django.conf import settings
        from django.test import override_settings

        from django_redisq import connection
        from django_redisq.testing import RedisServer

        cfg = self.cfg
        master = replica = None
        try:
            master = RedisServer().start()
            replica = RedisServer(None, None, "--replicaof", "127.0.0.1", str(master.port)).start()
            deadline = time.monotonic() + 15
            while not replica_synced(replica.port) and time.monotonic() < deadline:
                time.sleep(0.1)
            if not replica_synced(replica.port):
                raise RuntimeError("the replica did not sync")
        except Exception as exc:  # noqa: BLE001 - no replica, no section
            log(f"durable: skipped, a replica could not be started ({type(exc).__name__}: {exc})")
            for server in (replica, master):
                if server is not None:
                    server.cleanup()
            return
        try:
            for rep in range(cfg["repeats"]):
                for key, extra in (("off", {}), ("on", {"DURABLE_REPLICAS": 1})):
                    tasks = copy.deepcopy(settings.TASKS)
                    tasks["default"]["OPTIONS"].update({"REDIS_URL": master.url, **extra})
                    with override_settings(TASKS=tasks):
                        connection.reset()
                        redis.Redis(port=master.port).flushall()
                        c0 = time.process_time()
                        out = rate_loop(lambda i: self.noop.delay(i), cfg["durable_count"], cfg["durable_s"])
                        c1 = time.process_time()
                    connection.reset()
                    label = "with DURABLE_REPLICAS=1 (WAIT)" if extra else "no durable mode"
                    self.res.add(f"durable_{key}", f".delay() on master + 1 replica, {label}", "tasks/s", out["per_s"])
                    self.res.add(f"durable_{key}_us", f"  time per .delay(), {label}", "us", out["seconds"] / out["calls"] * 1e6)
                    self.res.add(f"durable_{key}_cpu", f"  producer CPU per .delay(), {label}", "us", (c1 - c0) / out["calls"] * 1e6)
                log(f"durable run {rep + 1}: off {fmt(self.res.rows['durable_off']['values'][-1])}/s, "
                    f"on {fmt(self.res.rows['durable_on']['values'][-1])}/s")
        finally:
            replica.cleanup()
            master.cleanup()

    # -- aenqueue --------------------------------------------------------

    def aenqueue(self) -> None:
        """enqueue from a thread against aenqueue on a running event loop: ours, Django's default, the peers."""
        from django_redisq.compat import BaseTaskBackend

        cfg = self.cfg
        c = cfg["async_concurrency"]
        kw = {"count": cfg["async_count"], "seconds": cfg["async_s"], "concurrency": c, "rounds": max(2, cfg["repeats"])}
        labels = {"thread": "enqueue() loop in a thread", "loop": "await aenqueue() one by one on a loop",
                  "gather": f"{c} aenqueue() at once (gather)",
                  "uvloop": "await aenqueue() one by one on uvloop", "hop-loop": "  Django's default aenqueue (sync_to_async), one by one",
                  "hop-gather": f"  Django's default aenqueue (sync_to_async), {c} at once"}
        self.r.flushall()
        noop, backend = self.noop, self.backend
        try:
            import uvloop  # noqa: F401
            has_uvloop = True
        except ImportError:
            has_uvloop = False
        rates = enqueue_modes(noop.enqueue, noop.aenqueue, hop=lambda i: BaseTaskBackend.aenqueue(backend, noop, (i,), {}),
                              uvloop=has_uvloop, **kw)
        for mode, values in rates.items():
            for v in values:
                self.res.add(f"async_{mode}", f"django-redisq: {labels[mode]}", "tasks/s", v)
        log("aenqueue (django-redisq): " + ", ".join(f"{m} {fmt(summary(v)['median'])}/s" for m, v in rates.items()))
        self.r.flushall()
        py, missing = ensure_django_peers_venv()
        for name in DJANGO_PEER_PACKAGES:
            if py is None or name in missing:
                why = missing.get(name, "no virtualenv")
                log(f"Django Tasks peer {name}: not measured ({why})")
                self.res.add(f"async_peer_{name}", f"{name}: not installed, not measured", "tasks/s", None, why[:80])
                continue
            argv = [str(py), str(BENCH / "peers" / "django_tasks_peer.py"), name, "--url", self.url, "--count", str(kw["count"]),
                    "--seconds", str(kw["seconds"]), "--concurrency", str(c), "--rounds", str(kw["rounds"])]
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=BENCH / "peers")
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                log(f"Django Tasks peer {name}: no result (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
                self.res.add(f"async_peer_{name}", f"{name}: failed, not measured", "tasks/s", None, f"exit {proc.returncode}")
                continue
            data = json.loads(line[len("RESULT "):])
            self.res.details.setdefault("async_peers", {})[name] = data
            tag = f"{name} {data['version']}"
            for mode, values in data["rates"].items():
                label = labels[mode] if mode == "thread" else f"{labels[mode]} [aenqueue: {data['aenqueue']}]"
                for v in values:
                    self.res.add(f"async_peer_{name}_{mode}", f"{tag}: {label}", "tasks/s", v)
            self.r.flushall()

    # -- drain -----------------------------------------------------------

    def drain_once(self, tag: str, concurrency: int, processes: int, n: int, marks: Sequence[int] = (),
                   on_mark: Callable[[int, list[subprocess.Popen[bytes]]], None] | None = None,
                   pool: str | None = None, task: Any = None, logging: str | None = None) -> dict[str, Any]:
        self.r.flushall()
        fill_s = self.fill(n, producers=2 if n >= 50_000 else 1, task=task)
        polls = 0

        def done() -> int:
            nonlocal polls
            polls += 1
            return self.processed()

        before = self.server_stats()
        t0, t0_wall = time.perf_counter(), time.time()
        ps = [self.start_worker(f"{tag}-{i}", concurrency=concurrency, pool=pool, logging=logging) for i in range(processes)]
        try:
            out = watch_drain(done, n, t0, self.cfg["drain_cap"], alive=lambda: all(p.poll() is None for p in ps),
                              marks=marks, on_mark=(lambda k: on_mark(k, ps)) if on_mark else None,
                              cpu={"worker": lambda: group_cpu_seconds([p.pid for p in ps]),
                                   "redis": lambda: redis_cpu_seconds(self.r)})
            after = self.server_stats()
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{tail(self.logdir / f'{tag}-0.log')}") from None
        finally:
            self.procs.stop(ps, grace=15)
        d = max(1, out["done"])
        own = polls + 2  # our GETs and the INFO calls between the snapshots
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        out.update(
            fill_s=fill_s, t0_wall=t0_wall,
            cmds_per_task=(delta["all_calls"] - own) / d,
            scripts_per_task=delta["scripts"] / d,
            reads_per_task=(delta["reads"] - own) / d,
            net_in_per_task=delta["net_in"] / d, net_out_per_task=delta["net_out"] / d,
            commands={k[4:]: round(v / d, 3) for k, v in sorted(delta.items()) if k.startswith("cmd:") and v / d >= 0.01},
        )
        return out

    def drain(self) -> None:
        cfg = self.cfg
        n, c = cfg["drain_n"], cfg["concurrency"]
        variants = [("c1", 1, 1, "1 process, --concurrency 1"), (f"c{c}", c, 1, f"1 process, --concurrency {c}"),
                    ("p2", 1, 2, "2 processes, --concurrency 1")]
        for rep in range(cfg["repeats"]):
            for tag, conc, procs, label in variants:
                out = self.drain_once(f"drain-{tag}-{rep}", conc, procs, n)
                self.res.add(f"drain_{tag}", f"drain {n:,}: {label}", "tasks/s", out["per_s"],
                             "capped" if out["capped"] else "")
                self.res.add(f"drain_{tag}_steady", f"  steady (after first 5%), {label}", "tasks/s", out["steady_per_s"])
                self.res.add(f"drain_{tag}_cpu", f"  worker CPU per task, {label}", "us", out.get("worker_cpu_us"))
                self.res.add(f"drain_{tag}_rcpu", f"  Redis CPU per task, {label}", "us", out.get("redis_cpu_us"))
                if tag == "c1":
                    self.res.add("startup", "  worker start to first ack (c1)", "s", out["startup_s"])
                    self.res.add("cmds_per_task", "Redis commands per task (c1, incl. in Lua)", "cmds", out["cmds_per_task"])
                    self.res.add("scripts_per_task", "  of which Lua script calls (c1)", "calls", out["scripts_per_task"])
                    self.res.add("reads_per_task", "  round trips per task (c1, server reads)", "reads", out["reads_per_task"])
                    self.res.add("net_per_task", "  bytes to+from Redis per task (c1)", "bytes",
                                 out["net_in_per_task"] + out["net_out_per_task"])
                self.res.details.setdefault("drain", []).append({"variant": tag, "run": rep, **out})
                log(f"drain {tag} run {rep + 1}: {fmt(out['per_s'])}/s (steady {fmt(out['steady_per_s'])}/s, "
                    f"{out['cmds_per_task']:.1f} cmds and {out['reads_per_task']:.2f} round trips per task)")
            self.drain_matrix(rep)
        self.r.flushall()

    def drain_matrix(self, rep: int) -> None:
        """Issue 14's drains: each task kind x logging (``--kinds``, ``--logging``) x shape (c1 c2 c4 c8, two processes).

        N queued before the worker starts; the figure is the rate from the first completion seen to the last
        (``active_per_s``), with the time from worker start to the first completion. The no-op without
        LOGGING is the drain rows above (today's figures) and is not run again.
        """
        for kind in self.args.kinds:
            for lg in self.args.logging:
                if (kind, lg) == ("noop", "none"):
                    continue
                n = self.cfg["sleep_n"] if kind == "sleep" else self.cfg["real_n"]
                for shape, conc, nproc in DRAIN_SHAPES:
                    key = f"m_{kind}_{lg}_{shape}"
                    out = self.drain_once(f"{key}-{rep}", conc, nproc, n, task=self.workloads[kind], logging=lg)
                    self.res.add(key, f"drain {n:,} {KINDS[kind]}, {LOGGINGS[lg]}: {SHAPE_LABELS[shape]} (first to last)", "tasks/s",
                                 out["active_per_s"], "capped" if out["capped"] else "")
                    self.res.add(f"{key}_startup", "  worker start to first completion", "s", out["startup_s"])
                    self.res.add(f"{key}_cpu", "  worker CPU per task", "us", out.get("worker_cpu_us"))
                    self.res.details.setdefault("drain_matrix", []).append(
                        {"kind": kind, "logging": lg, "shape": shape, "concurrency": conc, "processes": nproc, "run": rep, **out})
                    log(f"drain {kind} {lg} {shape} run {rep + 1}: first to last {fmt(out['active_per_s'])}/s, "
                        f"first after {fmt(out['startup_s'])}s, worker CPU {fmt(out.get('worker_cpu_us'))} us/task")

    # -- flow control ----------------------------------------------------

    def flow(self) -> None:
        """What priorities and fleet-wide limits cost a drain (1 process, --concurrency 1), the three interleaved per repeat.

        ``plain``: the default priority and no limit (the baseline of this run); ``mixed``: a quarter each at
        priorities -50, 0, 10 and 50 (three of them in the prioritized set); ``limited``: ``max_running=1000``,
        which never binds, so only the slot bookkeeping is measured.
        """
        from benchapp import tasks as bt

        n = self.cfg["drain_n"]
        mixed = tuple(self.noop.using(priority=p) for p in (-50, 0, 10, 50))
        variants = [("plain", None, "default priority, no limit"), ("mixed", mixed, "priorities -50/0/10/50 mixed"),
                    ("limited", bt.limited_noop, "max_running=1000 (never binding)")]
        for rep in range(self.cfg["repeats"]):
            for tag, task, label in variants:
                out = self.drain_once(f"flow-{tag}-{rep}", 1, 1, n, task=task)
                self.res.add(f"flow_{tag}", f"drain {n:,}, c1: {label}", "tasks/s", out["per_s"], "capped" if out["capped"] else "")
                self.res.add(f"flow_{tag}_steady", f"  steady, {label}", "tasks/s", out["steady_per_s"])
                self.res.add(f"flow_{tag}_cpu", f"  worker CPU per task, {label}", "us", out.get("worker_cpu_us"))
                self.res.add(f"flow_{tag}_rcpu", f"  Redis CPU per task, {label}", "us", out.get("redis_cpu_us"))
                self.res.add(f"flow_{tag}_cmds", f"  Redis commands per task, {label}", "cmds", out["cmds_per_task"])
                self.res.details.setdefault("flow", []).append({"variant": tag, "run": rep, **out})
                log(f"flow {tag} run {rep + 1}: {fmt(out['per_s'])}/s, {out['cmds_per_task']:.1f} cmds per task")
        self.r.flushall()

    # -- latency ---------------------------------------------------------

    def latency(self) -> None:
        cases = [("lat1", ("default",), "default", "1 queue", None), ("lat3", ("default", "mid", "low"), "low", "3 queues, task on the last", None),
                 ("lat1c", ("default",), "default", "1 queue, console LOGGING", "console")]
        self.r.config_set("notify-keyspace-events", "K$")
        try:
            for rep in range(self.cfg["repeats"]):
                for tag, queues, target, label, lg in cases:
                    out = self.latency_once(f"{tag}-{rep}", queues, target, logging=lg)
                    for what, name in (("start", "enqueue->start"), ("ack", "enqueue->ack")):
                        for p in ("p50", "p99"):
                            self.res.add(f"{tag}_{what}_{p}", f"latency {name} {p}, {label}", "ms", out.get(f"{what}_{p}_ms"))
                    if tag == "lat1":
                        self.res.add("enqueue_call", "  .delay() call itself (p50)", "ms", out.get("enqueue_call_p50_ms"))
                    self.res.details.setdefault("latency", []).append({"case": tag, "run": rep, **out})
                    log(f"latency {tag} run {rep + 1}: start p50 {fmt(out.get('start_p50_ms'))} p99 {fmt(out.get('start_p99_ms'))} ms, "
                        f"ack p50 {fmt(out.get('ack_p50_ms'))} p99 {fmt(out.get('ack_p99_ms'))} ms, lost {out['lost']}")
        finally:
            self.r.config_set("notify-keyspace-events", "")
        self.r.flushall()

    def latency_once(self, tag: str, queues: Sequence[str], target: str, pool: str | None = None, concurrency: int = 1,
                     task: Any = None, samples: int | None = None, logging: str | None = None) -> dict[str, Any]:
        self.r.flushall()
        task = task or self.stamp
        task = task if target == "default" else task.using(queue_name=target)
        p = self.start_worker(tag, queues, concurrency, pool, logging=logging)
        sub = self.r.pubsub(ignore_subscribe_messages=True)
        try:
            deadline = time.monotonic() + 30
            while not all(self.r.zcard(self.key(q, "workers")) for q in queues):
                if time.monotonic() > deadline or p.poll() is not None:
                    raise RuntimeError(f"worker did not register\n{tail(self.logdir / f'{tag}.log')}")
                time.sleep(0.02)
            sub.subscribe(f"__keyspace@0__:{self.key(target, 'processed')}")
            sub.get_message(timeout=1.0)  # the subscribe confirmation

            def wait_ack() -> bool:
                end = time.monotonic() + 5
                while (left := end - time.monotonic()) > 0:
                    m = sub.get_message(timeout=left)
                    if m and m.get("type") == "message":
                        return True
                return False

            return start_latency(lambda i: task.delay(i), self.r, START_KEY, samples or self.cfg["lat_samples"], wait_done=wait_ack)
        finally:
            sub.close()
            self.procs.stop([p], grace=15)

    # -- hoarding (issue 22) ----------------------------------------------

    def hoarding(self) -> None:
        """Issue 22: a worker busy on long tasks must not take tasks another worker could start now.

        Worker A (-c 2) serves ``default low``, worker B (-c 2) serves ``low``; two long tasks on ``default`` keep
        both of A's threads busy (only A serves it). Then, on their shared queue ``low``:
        ``idle``: one task at a time (as in ``latency``), enqueue->start and the share B started;
        ``burst``: 18 tasks in one script call, several rounds (fresh workers each), enqueue->start of each.
        A worker that hoards takes them (its idle queue's fetcher waits in BLMOVE beside B's) and starts them
        only once its long tasks end.
        """
        from benchapp.tasks import hold

        samples, rounds = self.cfg["lat_samples"], max(5, self.cfg["repeats"] * 5)
        low = self.stamp.using(queue_name="low")
        for rep in range(self.cfg["repeats"]):
            waits: list[float] = []
            idle: dict[str, Any] = {}
            on_b = taken = 0
            for k in range(rounds + 1):  # round 0: the idle measurement; then the bursts
                self.r.flushall()
                names = (f"hoard-a-{rep}-{k}", f"hoard-b-{rep}-{k}")
                busy = (samples * 0.06 + 30.0) if k == 0 else 4.0
                ps = [self.procs.start([*self.worker_argv(queues, 2), "--name", n], env=self.env, cwd=BENCH, log=self.logdir / f"{n}.log")
                      for n, queues in zip(names, (("default", "low"), ("low",)), strict=True)]
                try:
                    self._registered(1, "default")
                    self._registered(2, "low")
                    hold.enqueue(busy)
                    hold.enqueue(busy)
                    deadline = time.monotonic() + 30
                    while (self.r.llen(self.key("default", "pending")) or not self._started(2)) and time.monotonic() < deadline:
                        time.sleep(0.01)
                    time.sleep(1.5)  # past one BLMOVE timeout: each worker blocks as it does when busy
                    if k == 0:
                        ids: list[str] = []
                        idle = start_latency(partial(self._delay_into, ids, low), self.r, START_KEY, samples)
                        on_b, taken = self._ran_on(ids, names[1], "low"), len(ids)
                        continue
                    t0 = time.time()
                    low.enqueue_many([((i,), {}) for i in range(18)])
                    got = 0
                    deadline = time.monotonic() + busy + 5
                    while got < 18 and time.monotonic() < deadline:
                        item = self.r.blpop([START_KEY], timeout=max(0.01, deadline - time.monotonic()))
                        if item is None:
                            break
                        raw = item[1] if isinstance(item[1], str) else item[1].decode()
                        waits.append((float(raw.split()[1]) - t0) * 1000)
                        got += 1
                    waits += [(busy + 5) * 1000] * (18 - got)  # never started: counted as the whole wait
                finally:
                    self.procs.stop(ps, grace=5)
            self.res.add("hoard_idle_p50", "hoarding: A busy, B idle, one task at a time: enqueue->start p50", "ms", idle.get("start_p50_ms"))
            self.res.add("hoard_idle_p99", "hoarding: A busy, B idle, one task at a time: enqueue->start p99", "ms", idle.get("start_p99_ms"))
            self.res.add("hoard_idle_on_b", "  share started on the idle worker B", "%", 100 * on_b / max(1, taken))
            self.res.add("hoard_burst_p50", "hoarding: A busy, B idle, 18 at once: enqueue->start p50", "ms", percentile(waits, 50))
            self.res.add("hoard_burst_p99", "hoarding: A busy, B idle, 18 at once: enqueue->start p99", "ms", percentile(waits, 99))
            self.res.add("hoard_burst_max", "hoarding: A busy, B idle, 18 at once: enqueue->start max", "ms", max(waits))
            self.res.details.setdefault("hoarding", []).append({"run": rep, "idle": idle, "idle_on_b": on_b, "idle_n": taken,
                                                                "burst_waits_ms": waits})
            log(f"hoarding run {rep + 1}: one at a time: start p50 {fmt(idle.get('start_p50_ms'))} p99 {fmt(idle.get('start_p99_ms'))} ms, "
                f"{on_b}/{taken} on the idle worker, lost {idle.get('lost')}; 18 at once x {rounds}: start p50 "
                f"{fmt(percentile(waits, 50))} p99 {fmt(percentile(waits, 99))} max {fmt(max(waits))} ms")
        self.r.flushall()

    def _started(self, n: int) -> bool:
        """Whether ``n`` long tasks have left pending and are in a worker's list (the hoarding section's A is busy)."""
        return sum(self.r.llen(k) for k in self.r.scan_iter(self.keys("default").processing("*"))) >= n

    @staticmethod
    def _delay_into(ids: list[str], task: Any, i: int) -> None:
        ids.append(task.delay(i).id)

    def _registered(self, n: int, queue: str = "default") -> None:
        deadline = time.monotonic() + 30
        while self.r.zcard(self.key(queue, "workers")) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} worker(s) did not register")
            time.sleep(0.02)

    def _ran_on(self, ids: Sequence[str], name: str, queue: str = "default") -> int:
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hget(self.keys(queue).task(i), "workers")
        return sum(1 for w in pipe.execute() if (w or "").split(",")[-1].startswith(name + "."))

    # -- pools -----------------------------------------------------------

    def pools(self) -> None:
        """Drain rate and idle latency of each execution pool, with a no-op, an async sleep and a CPU-bound task.

        The runs of one repeat follow each other, so the CPU-bound ratio processes / threads
        is taken per repeat (the machine's load changes less within a repeat) and its median kept.
        """
        from benchapp.tasks import CPU_LOOPS, burn

        cfg = self.cfg
        runs = [x for x in POOL_RUNS if x[1] in self.args.pools]
        lats = [x for x in POOL_LATENCY if x[0] in self.args.pools]
        calls = []
        for _ in range(20):
            t = time.perf_counter()
            burn()
            calls.append((time.perf_counter() - t) * 1000)
        self.res.add("pool_cpu_call_ms", f"pools: CPU task alone, {CPU_LOOPS:,} loops (best of 20, this process)", "ms", min(calls))
        self.res.details["pools_cpu_loops"] = CPU_LOOPS
        self.r.config_set("notify-keyspace-events", "K$")
        try:
            for rep in range(cfg["repeats"]):
                steady: dict[tuple[str, str, int], list[float]] = {}
                for wl, pool, conc in runs:
                    n = cfg[f"pool_{wl}_n"]
                    key, label = f"pool_{wl}_{pool}_c{conc}", f"pools: {WORKLOADS[wl]}, drain {n:,}, --pool {pool} -c {conc}"
                    out = self.drain_once(f"{key}-{rep}", conc, 1, n, pool=pool, task=self.workloads[wl])
                    if out["steady_per_s"]:
                        steady.setdefault((wl, pool, conc), []).append(out["steady_per_s"])
                    cpu_us = out.get("worker_cpu_us")
                    self.res.add(f"{key}_steady", label + " (steady)", "tasks/s", out["steady_per_s"])
                    self.res.add(key, "  start to last ack", "tasks/s", out["per_s"], "capped" if out["capped"] else "")
                    self.res.add(f"{key}_cpu", "  worker CPU per task (children included)", "us", cpu_us)
                    self.res.add(f"{key}_cores", "  cores busy (steady rate x CPU per task)", "cores",
                                 out["steady_per_s"] * cpu_us / 1e6 if out["steady_per_s"] and cpu_us else None)
                    self.res.details.setdefault("pools", []).append(
                        {"workload": wl, "pool": pool, "concurrency": conc, "run": rep, **out})
                    log(f"pools {wl} {pool} -c {conc} run {rep + 1}: steady {fmt(out['steady_per_s'])}/s, "
                        f"start to last ack {fmt(out['per_s'])}/s, worker CPU {fmt(out.get('worker_cpu_us'))} us/task")
                p, t2, t4 = (statistics.fmean(steady[k]) if k in steady else None
                             for k in (("cpu", "processes", 2), ("cpu", "threads", 2), ("cpu", "threads", 4)))
                if p and t4:
                    self.res.add("pool_cpu_ratio", "pools: CPU-bound drain, processes -c 2 / threads -c 4 (steady, ABBA per run)", "ratio", p / t4)
                if p and t2:
                    self.res.add("pool_cpu_ratio_c2", "  processes -c 2 / threads -c 2", "ratio", p / t2)
                for pool, conc, name in lats:
                    tag = f"pool_lat_{pool}_{name}"
                    out = self.latency_once(f"{tag}-{rep}", ("default",), "default", pool, conc, self.workloads[name], cfg["pool_lat"])
                    label = f"pools: latency, --pool {pool} -c {conc}, {'async def' if name == 'astamp' else 'sync'} task"
                    for what, arrow in (("start", "enqueue->start"), ("ack", "enqueue->ack")):
                        for pc in ("p50", "p99"):
                            first = what == "start" and pc == "p50"
                            self.res.add(f"{tag}_{what}_{pc}", label + f": {arrow} {pc}" if first else f"  {arrow} {pc}", "ms",
                                         out.get(f"{what}_{pc}_ms"))
                    self.res.details.setdefault("pools_latency", []).append({"pool": pool, "concurrency": conc, "task": name, "run": rep, **out})
                    log(f"pools latency {pool} {name} run {rep + 1}: start p50 {fmt(out.get('start_p50_ms'))} "
                        f"p99 {fmt(out.get('start_p99_ms'))} ms, ack p50 {fmt(out.get('ack_p50_ms'))} p99 {fmt(out.get('ack_p99_ms'))} ms, "
                        f"lost {out['lost']}")
        finally:
            self.r.config_set("notify-keyspace-events", "")
        self.res.details["pools_table"] = pool_table(self.res, self.cfg)
        self.r.flushall()

    # -- cpu-bound -------------------------------------------------------

    def cpu_bound(self) -> None:
        """Issue 23's CPU-bound run: ``cpub_n`` tasks of ~``cpub_ms`` ms pure Python, ``-c 2``, worker start to last ack.

        The loop count is calibrated in this process (best of 20; ``BENCH_CPUB_LOOPS`` fixes it instead, to compare
        runs on a machine whose load changes) and given to the workers (``BENCH_CPU_LOOPS``).
        Each repeat drains with threads, processes, processes, threads (A B B A: a change of the machine's load
        cancels to first order); the ratio is threads' time / processes' time. ``cpu_first`` pushes when each
        process ran its first task: for the process pool, the first and second child's first task after worker start.
        """
        from benchapp import tasks as bt

        cfg = self.cfg
        n, want_ms = cfg["cpub_n"], cfg["cpub_ms"]
        if os.environ.get("BENCH_CPUB_LOOPS"):  # a fixed size, to compare runs (the calibration follows the machine's load)
            loops = int(os.environ["BENCH_CPUB_LOOPS"])
        else:
            best = min(_timed(bt.burn) for _ in range(20))
            loops = int(bt.CPU_LOOPS * want_ms / (best * 1000))
        best_ms = min(_timed(lambda: bt.burn(loops)) for _ in range(10)) * 1000
        self.res.add("cpub_task_ms", f"cpu-bound: one task alone ({loops:,} loops, best of 10, this process)", "ms", best_ms)
        env_old = self.env
        self.env = dict(self.env, BENCH_CPU_LOOPS=str(loops))
        try:
            for rep in range(cfg["cpub_repeats"]):
                times: dict[str, list[float]] = {}
                for pool in ("threads", "processes", "processes", "threads"):
                    self.r.delete(bt.FIRST_KEY)
                    out = self.drain_once(f"cpub-{pool}-{rep}", 2, 1, n, pool=pool, task=bt.cpu_first)
                    firsts = sorted(float(x.split()[1]) for x in self.r.lrange(bt.FIRST_KEY, 0, -1))
                    times.setdefault(pool, []).append(out["seconds"])
                    self.res.add(f"cpub_{pool}", f"cpu-bound {n} x {want_ms:g} ms, -c 2, --pool {pool}: worker start to last ack",
                                 "s", out["seconds"], "capped" if out["capped"] else "")
                    if pool == "processes" and len(firsts) >= 2:
                        self.res.add("cpub_first_child", "  processes: worker start to a child's first task", "s",
                                     firsts[0] - out["t0_wall"])
                        self.res.add("cpub_second_gap", "  processes: second child's first task after the first's", "s",
                                     firsts[1] - firsts[0])
                    self.res.details.setdefault("cpu_bound", []).append({"pool": pool, "run": rep, "firsts": firsts, **out})
                    log(f"cpu-bound {pool} run {rep + 1}: {out['seconds']:.2f}s, first tasks at "
                        + ", ".join(f"{f - out['t0_wall']:.3f}s" for f in firsts))
                self.res.add("cpub_ratio", "cpu-bound: threads' time / processes' time (ABBA per run)", "ratio",
                             statistics.fmean(times["threads"]) / statistics.fmean(times["processes"]))
        finally:
            self.env = env_old
        self.r.flushall()

    # -- partitions ------------------------------------------------------

    def partitions(self) -> None:
        """One logical queue ("low") with PARTITIONS 1, 2, 4, 8 on this single server: enqueue and drain rates.

        On one redis-server, partitions add no capacity (one thread serves them all); what this shows is what
        they cost: a round-robin pick per enqueue, one fetch thread per partition in the worker.
        """
        from django.conf import settings
        from django.test import override_settings

        from django_redisq import connection
        from django_redisq.core.partitions import physical

        cfg, n, conc = self.cfg, self.cfg["partition_n"], self.cfg["concurrency"]
        rows: list[tuple[str, ...]] = []
        for rep in range(cfg["repeats"]):
            for parts in PARTITION_COUNTS:
                tasks = json.loads(json.dumps(settings.TASKS))
                tasks["default"]["OPTIONS"]["QUEUE_OPTIONS"] = {"low": {"PARTITIONS": parts}}
                names = physical("low", parts)
                with override_settings(TASKS=tasks):
                    connection.reset()
                    low = self.noop.using(queue_name="low")
                    self.r.flushall()
                    out = rate_loop(lambda i, t=low: t.enqueue(i), cfg["delay_count"], cfg["delay_s"])
                    self.r.flushall()
                    t = time.perf_counter()
                    fill_local(self.noop, n, "low")
                    many = n / (time.perf_counter() - t)
                    spread = [int(self.r.llen(self.keys(q).pending)) for q in names]
                    env = dict(self.env, BENCH_PARTITIONS=str(parts))
                    tag = f"partitions-{parts}-{rep}"
                    t0 = time.perf_counter()
                    p = self.procs.start(self.worker_argv(["low"], conc), env=env, cwd=BENCH, log=self.logdir / f"{tag}.log")
                    try:
                        drained = watch_drain(
                            lambda qs=names: sum(self.processed(q) for q in qs), n, t0, cfg["drain_cap"],
                            alive=lambda w=p: w.poll() is None,
                            cpu={"worker": lambda w=p: group_cpu_seconds([w.pid]), "redis": lambda: redis_cpu_seconds(self.r)})
                    except RuntimeError as exc:
                        raise RuntimeError(f"{exc}\n{tail(self.logdir / f'{tag}.log')}") from None
                    finally:
                        self.procs.stop([p], grace=15)
                connection.reset()
                self.res.add(f"part{parts}_delay", f"PARTITIONS {parts}: .enqueue() loop", "tasks/s", out["per_s"])
                self.res.add(f"part{parts}_many", f"  enqueue_many of {n:,} (batches of 1000)", "tasks/s", many)
                self.res.add(f"part{parts}_drain", f"  drain {n:,}, 1 process --concurrency {conc}", "tasks/s", drained["per_s"],
                             "capped" if drained["capped"] else "")
                self.res.add(f"part{parts}_steady", "  steady (after first 5%)", "tasks/s", drained["steady_per_s"])
                self.res.add(f"part{parts}_rcpu", "  Redis CPU per task, drain", "us", drained.get("redis_cpu_us"))
                self.res.details.setdefault("partitions", []).append(
                    {"partitions": parts, "run": rep, "enqueue_per_s": out["per_s"], "enqueue_many_per_s": many,
                     "spread": spread, **drained})
                rows.append((str(parts), fmt(out["per_s"]), fmt(many), fmt(drained["per_s"]), fmt(drained["steady_per_s"]),
                             fmt(drained.get("worker_cpu_us")), fmt(drained.get("redis_cpu_us")), f"{min(spread)}-{max(spread)}"))
                log(f"partitions {parts} run {rep + 1}: enqueue {fmt(out['per_s'])}/s, enqueue_many {fmt(many)}/s, "
                    f"drain {fmt(drained['per_s'])}/s (steady {fmt(drained['steady_per_s'])}/s), per partition {spread}")
        head = ("PARTITIONS", ".enqueue()/s", "enqueue_many/s", "drain/s", "steady/s", "worker us/task", "Redis us/task",
                "tasks per partition")
        self.res.details["partitions_table"] = (
            f"one logical queue over PARTITIONS hash tags, one redis-server, {n:,} tasks, 1 worker -c {conc}:\n"
            + _columns([head, *rows], left=1))
        self.r.flushall()

    # -- redis-cost ------------------------------------------------------

    def redis_cost(self) -> None:
        """What one task costs the Redis server, ours and every peer's (``--peers``), in this run; see ``common.task_cost``.

        Ours: ``.delay()`` one by one, then one ``runworker --concurrency 1``; our task hash is the task's status
        record and is always kept for RESULT_TTL, so "without results" is n/a. Each peer: its default worker,
        in its own virtualenv, with its default result setting, then the other one where it has a switch.
        """
        import hashlib

        cfg = self.cfg
        n, cap = cfg["cost_n"], cfg["cost_cap"]
        scripts: dict[str, str] = {}
        with contextlib.suppress(Exception):
            from django_redisq.store.scripts import NAMES, source

            scripts = {hashlib.sha1(source(name).encode()).hexdigest(): name for name in NAMES}
        rc = cost_client(self.url)
        done_key = self.key("default", "processed")
        ps: list[subprocess.Popen[bytes]] = []

        def start() -> None:
            ps[:] = [self.start_worker("cost", concurrency=1)]

        runs: list[dict[str, Any]] = []
        for rep in range(cfg["repeats"]):
            out = task_cost(CostMeter(rc, scripts), enqueue=lambda i: self.noop.delay(i), n=n, start=start,
                            stop=lambda: self.procs.stop(ps, grace=15), done=lambda: int(rc.get(done_key) or 0),
                            reset=rc.flushall, cap=cap, alive=lambda: all(p.poll() is None for p in ps))
            runs.append({"who": "django-redisq", "results": True, "switch": False, "run": rep, **out})
            log(f"redis-cost django-redisq run {rep + 1}: {_cost_total(out, 'cpu_us'):.1f} us server CPU, "
                f"{_cost_total(out, 'cmds'):.1f} commands per task")
        rc.flushall()
        plan = {"cost": {"n": n, "cap": cap}}
        for name in self.args.peers:
            py, why = peer_python(name)
            if py is None:
                runs.append({"who": name, "error": why})
                continue
            mode = ""
            for _ in range(2):
                got = [self.run_peer_plan(name, py, plan, {"BENCH_RESULTS": mode}) for _ in range(cfg["repeats"])]
                data = [d for d in got if d and "cost" in d]
                if not data:
                    runs.append({"who": name, "error": "its run failed; see the log above", "results_mode": mode})
                    break
                for rep, d in enumerate(data):
                    runs.append({"who": f"{PEER_LABELS.get(name, name)} {d['version']}", "results": d["results_stored"],
                                 "switch": d["results_switch"], "run": rep, **d["cost"]})
                if not data[0]["results_switch"] or mode:
                    break
                mode = "off" if data[0]["results_stored"] else "on"
        self.res.details["redis_cost"] = runs
        self.res.details["redis_cost_table"] = cost_table(runs, n)
        for r in runs:
            if "stats" in r:
                tag = f"{r['who']}, results {'on' if r['results'] else 'off'}"
                self.res.add(f"cost_{tag}", f"redis-cost {tag}: server CPU per task", "us", _cost_total(r, "cpu_us"))
                self.res.add(f"cost_{tag}_cmd", "  top-level command time per task", "us", _cost_total(r, "cmd_us", "slowlog"))
        rc.close()

    def run_peer_plan(self, name: str, py: Path, plan: dict[str, Any], env_extra: dict[str, str] | None = None,
                      budget: float = 600.0) -> dict[str, Any] | None:
        """Run ``peers/run_peer.py`` with ``plan`` for one peer; its RESULT as a dict, or None (logged)."""
        pidfile = self.logdir / f"{name}.pids"
        argv = [str(py), str(BENCH / "peers" / "run_peer.py"), name, "--url", self.url, "--plan", json.dumps(plan),
                "--pidfile", str(pidfile), "--logdir", str(self.logdir)]
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"} | {"BENCH_LOGGING": "console"} | (env_extra or {})
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True, env=env)
        try:
            stdout, _ = proc.communicate(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                stdout, _ = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                stdout, _ = proc.communicate()
        finally:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            for line in pidfile.read_text().split() if pidfile.exists() else []:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(line), signal.SIGKILL)
            self.r.flushall()
        found = [ln for ln in (stdout or "").splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not found:
            log(f"peer {name}: no result (exit {proc.returncode})")
            return None
        return json.loads(found[-1][len("RESULT "):])

    # -- flatness and memory ---------------------------------------------

    def flatness(self) -> None:
        """Few tasks waiting in Redis database 0 (backend ``default``), many in database 1 (backend ``big``).

        Both backlogs exist at once, so the rounds of the two sizes alternate in
        time and a machine that speeds up or slows down affects both alike.
        """
        from django.tasks import task_backends

        cfg = self.cfg
        small, big, m = cfg["flat_small"], cfg["flat_big"], cfg["flat_ops"]
        rbig = redis.Redis(host="127.0.0.1", port=self.server.port, db=1, decode_responses=True)
        sides = {small: (self.noop, self.backend.broker), big: (self.noop.using(backend="big"), task_backends["big"].broker)}
        self.r.flushall()
        fill_local(self.noop, small)
        for size, r in ((small, self.r), (big, rbig)):
            mem0 = self.r.info("memory")["used_memory"]
            fill_s = self.fill(size, producers=2, backend="default" if size == small else "big")
            mem1 = self.r.info("memory")["used_memory"]
            if size == small:  # filled above already: this measures an empty fill
                continue
            per_task = (mem1 - mem0) / size
            some = r.lindex(self.key("default", "pending"), 0)
            sample = {}
            if some:
                with contextlib.suppress(redis.RedisError):
                    sample = {"task_hash": r.memory_usage(self.keys("default").task(some), samples=0),
                              "task_hash_encoding": r.object("encoding", self.keys("default").task(some)),
                              "pending_list": r.memory_usage(self.key("default", "pending"), samples=0)}
            self.res.details["memory"] = {"pending": size, "used_memory_delta": mem1 - mem0, "bytes_per_task": per_task,
                                          "fill_s": fill_s, **sample}
            self.res.add("mem_per_task", f"Redis bytes per pending task ({size:,} pending)", "bytes", per_task)
            self.res.add("fill_rate", f"  fill rate, enqueue_many x2 producers ({size:,})", "tasks/s", size / fill_s)
            log(f"{size:,} pending: {per_task:,.0f} bytes per task (filled in {fill_s:.1f}s) {sample}")
        for rep in range(cfg["repeats"]):
            for size, cost_by_op in self.flat_ops(sides, m).items():
                for op, cost in cost_by_op.items():
                    self.res.details.setdefault("flatness", []).append({"waiting": size, "run": rep, "op": op, **cost})
                    for side in ("client", "server"):
                        self.res.add(f"flat_{op}_{side}_{size}", f"{op} cost, {side}, {size:,} waiting", "us/task", cost[side])
            log(f"flatness run {rep + 1}: " + "; ".join(f"{size:,} waiting: " + ", ".join(
                f"{op} {fmt(self.res.rows[f'flat_{op}_client_{size}']['values'][-1])}us" for op in ("enqueue", "fetch", "ack"))
                for size in (small, big)))
        for op in ("enqueue", "fetch", "ack"):
            for side in ("client", "server"):
                a, b = self.res.median(f"flat_{op}_{side}_{small}"), self.res.median(f"flat_{op}_{side}_{big}")
                if a and b:
                    self.res.add(f"flat_{op}_{side}_ratio", f"flatness {op} {side} cost {big:,} / {small:,}", "ratio", b / a)
        self.r.flushall()
        rbig.flushdb()
        rbig.close()

    def flat_ops(self, sides: dict[int, tuple[Any, Any]], m: int, chunks: int = 5) -> dict[int, dict[str, dict[str, float]]]:
        """Per-task cost of ``m`` single enqueues (``.delay``), fetches and acks: client wall us and Redis us (every command).

        For each backlog size ``(task, broker)``: ``chunks`` rounds (enqueue, fetch, ack), the sizes
        taking turns, after one warm-up round; the median round counts.
        """
        ops = ("enqueue", "fetch", "ack")
        samples = {size: {op: {"client": [], "server": []} for op in ops} for size in sides}
        k = max(1, m // chunks)

        def timed(size: int, op: str, fn: Callable[[int], Any]) -> None:
            self.r.config_resetstat()
            t = time.perf_counter()
            for i in range(k):
                fn(i)
            samples[size][op]["client"].append((time.perf_counter() - t) / k * 1e6)
            cs = self.r.info("commandstats")  # every command but the bench's own: a plain enqueue runs no script
            usec = sum(v["usec"] for name, v in cs.items() if name[len("cmdstat_"):] not in OWN_COMMANDS)
            samples[size][op]["server"].append(usec / k)

        for rnd in range(chunks + 1):  # round 0 warms up (script loading, caches) and is not kept
            for size, (task, broker) in sides.items():
                if rnd == 1:
                    for per_op in samples[size].values():
                        for v in per_op.values():
                            v.clear()
                broker.heartbeat(["default"], FLAT_WORKER, {})  # a fetching worker is registered
                ids: list[str] = []
                timed(size, "enqueue", lambda i, task=task: task.delay(i))
                timed(size, "fetch", lambda i, b=broker, ids=ids: ids.extend(d.id for d in b.fetch("default", FLAT_WORKER, 1)))
                timed(size, "ack", lambda i, b=broker, ids=ids: b.ack_many("default", FLAT_WORKER, [(ids[i], "0")]) if i < len(ids) else None)
        return {size: {op: {side: statistics.median(v) for side, v in per_op.items()} for op, per_op in by_op.items()}
                for size, by_op in samples.items()}

    # -- worker memory ---------------------------------------------------

    def rss(self) -> None:
        small, big = self.cfg["rss_small"], self.cfg["rss_big"]
        seen: dict[int, int | None] = {}

        def mark(k: int, ps: list[subprocess.Popen[bytes]]) -> None:
            seen[k] = vmrss_kb(ps[0].pid)

        out = self.drain_once("rss", 1, 1, big, marks=(small, big), on_mark=mark)
        a, b = seen.get(small), seen.get(big)
        self.res.add("rss_small", f"worker RSS after {small:,} tasks", "MiB", a / 1024 if a else None)
        self.res.add("rss_big", f"worker RSS after {big:,} tasks", "MiB", b / 1024 if b else None)
        if a and b:
            self.res.add("rss_ratio", f"  RSS ratio {big:,} / {small:,}", "ratio", b / a)
        self.res.add("drain_c1_big", f"  drain {big:,}: 1 process, --concurrency 1", "tasks/s", out["per_s"])
        self.res.details["rss"] = {"kb": seen, **out}
        log(f"rss: {a} KiB after {small:,}, {b} KiB after {big:,}; drained at {fmt(out['per_s'])}/s")
        self.r.flushall()

    # -- peers -----------------------------------------------------------

    def peer_plan(self) -> dict[str, Any]:
        """What ``peers/run_peer.py`` measures for each peer: today's no-op drain and enqueue, and issue 14's matrix."""
        cfg = self.cfg
        drains: list[dict[str, Any]] = [{"tag": "noop", "kind": "noop", "conc": None, "procs": 1, "n": cfg["peer_n"], "cap": cfg["peer_cap"]}]
        if "rpush" in self.args.kinds:
            drains += [{"tag": f"rpush_{shape}", "kind": "rpush", "conc": conc, "procs": nproc, "n": cfg["peer_real_n"],
                        "cap": cfg["peer_real_cap"]} for shape, conc, nproc in DRAIN_SHAPES]
        if "sleep" in self.args.kinds:
            drains += [{"tag": f"sleep_{shape}", "kind": "sleep", "conc": conc, "procs": nproc, "n": cfg["peer_sleep_n"],
                        "cap": cfg["peer_real_cap"]} for shape, conc, nproc in DRAIN_SHAPES if shape in PEER_SLEEP_SHAPES]
        return {"repeats": cfg["repeats"], "drains": drains, "latency": {"samples": cfg["peer_lat"]},
                "enqueue": {"kinds": ["noop", "rpush"], "count": cfg["peer_enqueue"], "seconds": cfg["peer_enqueue_s"]}}

    def peers(self) -> None:
        """Each peer in its virtualenv (built on first use), by ``peers/run_peer.py``; one that fails is "not measured (why)"."""
        cfg = self.cfg
        plan = self.peer_plan()
        not_measured = self.res.details.setdefault("peers_not_measured", {})
        for name in self.args.peers:
            py, why = peer_python(name)
            if py is None:
                log(f"peer {name}: not measured ({why})")
                not_measured[name] = why
                self.res.add(f"peer_{name}_drain", f"{name}: not measured", "tasks/s", None, why[:80])
                continue
            pidfile = self.logdir / f"{name}.pids"
            argv = [str(py), str(BENCH / "peers" / "run_peer.py"), name, "--url", self.url, "--plan", json.dumps(plan),
                    "--pidfile", str(pidfile), "--logdir", str(self.logdir)]
            budget = cfg["repeats"] * (sum(d["cap"] + 40 for d in plan["drains"]) + 2 * cfg["peer_enqueue_s"] + 60
                                       + cfg["peer_lat"] * 0.05) + 60
            log(f"peer {name}: measuring (at most {budget:.0f}s)")
            # each peer's INFO console logging (see its module); not the bench's Django settings
            env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"} | {"BENCH_LOGGING": "console"}
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True, env=env)
            try:
                stdout, _ = proc.communicate(timeout=budget)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    stdout, _ = proc.communicate(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    stdout, _ = proc.communicate()
            finally:
                if proc.poll() is None:  # e.g. Ctrl-C here: the driver and its workers go too
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
                for line in pidfile.read_text().split() if pidfile.exists() else []:  # any worker it left behind
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(int(line), signal.SIGKILL)
                self.r.flushall()
            found = [ln for ln in (stdout or "").splitlines() if ln.startswith("RESULT ")]
            if proc.returncode != 0 or not found:
                why = f"its run failed (exit {proc.returncode}); see the log above"
                log(f"peer {name}: no result (exit {proc.returncode}); not measured")
                not_measured[name] = why
                self.res.add(f"peer_{name}_drain", f"{name}: not measured", "tasks/s", None, why[:80])
                continue
            self.add_peer(name, json.loads(found[-1][len("RESULT "):]))

    def add_peer(self, name: str, data: dict[str, Any]) -> None:
        self.res.details.setdefault("peers", {})[name] = data
        label = f"{name} {data['version']}"
        meta = data.get("drain_meta", {})
        for d in data["drain"].get("noop", []):  # today's row: the no-op, the peer's default worker
            self.res.add(f"peer_{name}_drain", f"{label}: drain {meta['noop']['n']:,}, {data['worker']}", "tasks/s", d["per_s"],
                         "capped: rate so far" if d["capped"] else "")
            self.res.add(f"peer_{name}_drain_steady", f"  {name} steady (after first 5%)", "tasks/s", d["steady_per_s"])
            self.res.add(f"peer_{name}_cpu", f"  {name} worker CPU per task", "us", d.get("worker_cpu_us"))
            self.res.add(f"peer_{name}_rcpu", f"  {name} Redis CPU per task", "us", d.get("redis_cpu_us"))
        for tag, runs in data["drain"].items():
            if tag == "noop":
                continue
            kind, shape = tag.split("_", 1)
            for d in runs:
                self.res.add(f"peer_{name}_{tag}", f"{label}: drain {meta[tag]['n']:,} {KINDS[kind]}, {SHAPE_LABELS[shape]} "
                             f"({meta[tag]['desc']}; first to last)", "tasks/s", d["active_per_s"], "capped: rate so far" if d["capped"] else "")
                self.res.add(f"peer_{name}_{tag}_startup", f"  {name} worker start to first completion", "s", d["startup_s"])
                self.res.add(f"peer_{name}_{tag}_cpu", f"  {name} worker CPU per task", "us", d.get("worker_cpu_us"))
        unsupported = {t: m["desc"] for t, m in meta.items() if not m.get("supported", True)}
        failed = {t: m["error"] for t, m in meta.items() if m.get("error")}
        if unsupported or failed:
            self.res.details.setdefault("peers_partial", {})[name] = {"unsupported": unsupported, "failed": failed}
        for kind, runs in data["enqueue"].items():
            for e in runs:
                self.res.add(f"peer_{name}_enqueue" + ("" if kind == "noop" else f"_{kind}"),
                             f"{label}: single enqueue loop" + ("" if kind == "noop" else f", {KINDS[kind]} task"), "tasks/s", e["per_s"])
        for lat in data["latency"]:
            self.res.add(f"peer_{name}_lat_p50", f"{label}: latency enqueue->start p50", "ms", lat.get("start_p50_ms"))
            self.res.add(f"peer_{name}_lat_p99", f"{label}: latency enqueue->start p99", "ms", lat.get("start_p99_ms"))
            self.res.add(f"peer_{name}_enqueue_call", f"  {name} enqueue call itself (p50)", "ms", lat.get("enqueue_call_p50_ms"))

    # -- targets ---------------------------------------------------------

    def targets(self) -> list[dict[str, Any]]:
        m = self.res.median
        out: list[dict[str, Any]] = []

        def check(what: str, ours: float | None, goal: float | None, ok: Callable[[float, float], bool], goal_text: str) -> None:
            if ours is None or goal is None:
                return
            out.append({"target": what, "ours": ours, "goal": goal, "goal_text": goal_text, "met": bool(ok(ours, goal))})

        ge, le, lt = (lambda a, b: a >= b), (lambda a, b: a <= b), (lambda a, b: a < b)
        peer_drain = [(n, m(f"peer_{n}_drain")) for n in PEER_NAMES if m(f"peer_{n}_drain")]
        peer_enq = [(n, m(f"peer_{n}_enqueue")) for n in PEER_NAMES if m(f"peer_{n}_enqueue")]
        if peer_drain:
            best, v = max(peer_drain, key=lambda x: x[1] or 0)
            check(f"drain c1 >= 5x best peer ({best})", m("drain_c1"), 5 * (v or 0), ge, f"5 x {fmt(v)}")
        rb1 = m("rb_lpush_p1")
        check("drain c1 >= 1/2 redis-benchmark -P 1 lpush", m("drain_c1"), rb1 / 2 if rb1 else None, ge, f"{fmt(rb1)} / 2")
        if peer_enq:
            best, v = max(peer_enq, key=lambda x: x[1] or 0)
            check(f".delay() >= fastest peer enqueue ({best})", m("delay"), v, ge, fmt(v))
        rb16 = m("rb_lpush_p16")
        check("enqueue_many >= 1/5 redis-benchmark -P 16 lpush", m("enqueue_many"), rb16 / 5 if rb16 else None, ge, f"{fmt(rb16)} / 5")
        check("idle latency start p50 <= huey's", m("lat1_start_p50"), m("peer_huey_lat_p50"), le, "huey p50")
        check("idle latency start p99 < 5 ms", m("lat1_start_p99"), 5.0, lt, "5 ms")
        check("3-queue latency start p99 < 50 ms", m("lat3_start_p99"), 50.0, lt, "50 ms")
        for op in ("enqueue", "fetch", "ack"):
            check(f"flatness {op} (client cost) < 1.2", m(f"flat_{op}_client_ratio"), 1.2, lt, "1.2")
        check("worker RSS growth <= 10%", m("rss_ratio"), 1.10, le, "1.10")
        check("CPU-bound drain: processes -c 2 / threads -c 4 >= 1.7 (about 2x on 2 cores)", m("pool_cpu_ratio"), 1.7, ge, "1.7")
        thread = m("async_thread")
        check("aenqueue one by one on a loop >= enqueue in a thread", m("async_loop"), thread, ge, f"{fmt(thread)} (thread)")
        if m("async_uvloop") is not None:
            check("aenqueue one by one on uvloop >= enqueue in a thread", m("async_uvloop"), thread, ge, f"{fmt(thread)} (thread)")
        check(f"{self.cfg['async_concurrency']} aenqueue at once >= enqueue in a thread", m("async_gather"), thread, ge, f"{fmt(thread)} (thread)")
        hop = m("async_hop-loop")
        check("aenqueue one by one >= Django's default aenqueue (thread hop)", m("async_loop"), hop, ge, f"{fmt(hop)} (hop)")
        self.issue14_targets(check)
        return out

    def issue14_targets(self, check: Callable[..., None]) -> None:
        """Issue 14's targets, on the realistic figures (round-trip task, console LOGGING), each against this run's figures."""
        m = self.res.median
        ge, le = (lambda a, b: a >= b), (lambda a, b: a <= b)
        one_proc = [s for s, _, nproc in DRAIN_SHAPES if nproc == 1]

        def best(prefix: str) -> tuple[str | None, float | None]:
            vals = [(s, m(f"{prefix}{s}")) for s in one_proc]
            vals = [(s, v) for s, v in vals if v is not None]
            return max(vals, key=lambda x: x[1]) if vals else (None, None)

        shape, ours = best("m_rpush_console_")
        measured = [n for n in self.args.peers if n in self.res.details.get("peers", {})]
        for n in measured:
            pshape, theirs = best(f"peer_{n}_rpush_")
            factor = 3 if n == "vtasks" else 5
            check(f"drain, round-trip task, 1 process (best -c: ours {shape}) >= {factor}x {PEER_LABELS[n]} (best -c: {pshape})",
                  ours, factor * theirs if theirs else None, ge, f"{factor} x {fmt(theirs)}")
        check("worker start to first task (round-trip task, -c 1) <= 0.3 s", m("m_rpush_console_c1_startup"), 0.3, le, "0.3 s")
        sl = {s: m(f"m_sleep_console_{s}") for s in one_proc}
        check("1 ms sleep task: -c 4 >= -c 1 (c1 / c2 / c4 / c8: " + " / ".join(fmt(sl[s]) for s in one_proc) + ")",
              sl.get("c4"), sl.get("c1"), ge, "c1")
        p2, c1 = m("m_rpush_console_p2"), m("m_rpush_console_c1")
        check("two processes >= 1.8x our one process (round-trip task, -c 1)", p2, 1.8 * c1 if c1 else None, ge, f"1.8 x {fmt(c1)}")
        peer_p2 = [(n, m(f"peer_{n}_rpush_p2")) for n in measured]
        peer_p2 = [(n, v) for n, v in peer_p2 if v is not None]
        if peer_p2:
            bn, bv = max(peer_p2, key=lambda x: x[1])
            check(f"two processes >= 2x the best peer's two processes ({PEER_LABELS[bn]})", p2, 2 * bv, ge, f"2 x {fmt(bv)}")
        huey = m("peer_huey_enqueue_rpush")
        check(".delay() (round-trip task) >= Huey's enqueue", m("delay_rpush"), huey, ge, f"{fmt(huey)} (huey)")
        bare = [v for v in (m("bare_lpush_resp2"), m("bare_lpush_resp3")) if v is not None]
        check(".delay() (round-trip task) >= 90% of the bare redis-py LPUSH loop (the faster RESP)", m("delay_rpush"),
              0.9 * max(bare) if bare else None, ge, f"0.9 x {fmt(max(bare)) if bare else '-'}")
        lat = [(n, m(f"peer_{n}_lat_p50"), m(f"peer_{n}_lat_p99")) for n in measured]
        lat50 = [(n, a) for n, a, _ in lat if a is not None]
        lat99 = [(n, b) for n, _, b in lat if b is not None]
        if lat50:
            bn, bv = min(lat50, key=lambda x: x[1])
            check(f"idle latency start p50 (console LOGGING) <= best peer's ({PEER_LABELS[bn]})", m("lat1c_start_p50"), bv, le, f"{fmt(bv)} ms")
        if lat99:
            bn, bv = min(lat99, key=lambda x: x[1])
            check(f"idle latency start p99 (console LOGGING) <= best peer's ({PEER_LABELS[bn]})", m("lat1c_start_p99"), bv, le, f"{fmt(bv)} ms")


def summary_tables(res: Results, cfg: dict[str, Any], peers: Sequence[str]) -> str:
    """Issue 14's realistic table (the round-trip task, console LOGGING), then django-redisq's drain matrix; medians."""
    m = res.median
    details = res.details
    versions = {n: d.get("version", "") for n, d in details.get("peers", {}).items()}
    nm = details.get("peers_not_measured", {})
    partial = details.get("peers_partial", {})
    cols = [n for n in peers if n in versions or n in nm]
    out: list[str] = []
    if any(k.startswith("m_rpush_console_") for k in res.rows) or versions:
        head = ("", "django-redisq", *(f"{PEER_LABELS.get(n, n)} {versions.get(n, '')}".strip() for n in cols))

        def cell(name: str, ours: str | None, theirs: str | None, unit: str = "/s", peer_tag: str | None = None) -> str:
            key = ours if name == "ours" else theirs
            if name != "ours" and name in nm:
                return "not measured"
            if name != "ours" and peer_tag and peer_tag in partial.get(name, {}).get("unsupported", {}):
                return "n/a"
            if name != "ours" and peer_tag and peer_tag in partial.get(name, {}).get("failed", {}):
                return "failed"
            v = m(key) if key else None
            return "-" if v is None else f"{fmt(v)}{unit}"

        rows: list[tuple[str, ...]] = [head]
        for shape, _, _ in DRAIN_SHAPES:
            rows.append((f"drain {cfg['real_n']:,} round-trip tasks, {SHAPE_LABELS[shape]}",
                         cell("ours", f"m_rpush_console_{shape}", None),
                         *(cell(n, None, f"peer_{n}_rpush_{shape}", peer_tag=f"rpush_{shape}") for n in cols)))
        rows.append(("  worker start to first task (-c 1)", cell("ours", "m_rpush_console_c1_startup", None, " s"),
                     *(cell(n, None, f"peer_{n}_rpush_c1_startup", " s", peer_tag="rpush_c1") for n in cols)))
        for shape in PEER_SLEEP_SHAPES:
            rows.append((f"drain {cfg['sleep_n']:,} 1 ms sleep tasks, {SHAPE_LABELS[shape]}", cell("ours", f"m_sleep_console_{shape}", None),
                         *(cell(n, None, f"peer_{n}_sleep_{shape}", peer_tag=f"sleep_{shape}") for n in cols)))
        rows.append((".delay() loop (single enqueue, round-trip task)", cell("ours", "delay_rpush", None),
                     *(cell(n, None, f"peer_{n}_enqueue_rpush") for n in cols)))

        def lat(p50: str, p99: str, name: str) -> str:
            if name in nm:
                return "not measured"
            a, b = m(p50), m(p99)
            return "-" if a is None and b is None else f"{fmt(a)} / {fmt(b)} ms"

        rows.append(("idle latency enqueue->start p50 / p99", lat("lat1c_start_p50", "lat1c_start_p99", "ours"),
                     *(lat(f"peer_{n}_lat_p50", f"peer_{n}_lat_p99", n) for n in cols)))
        out.append("Realistic summary: the task does one Redis round trip (RPUSH), console LOGGING at INFO (the peers: their own "
                   "INFO console logging); drain rates from the first completion to the last, N queued before the worker starts; medians")
        out.append(_columns(rows, left=1))
        notes = [f"  {PEER_LABELS.get(n, n)}: -c N is {SHAPE_NOTES.get(n, '?')}" for n in cols if n not in nm]
        notes += [f"  {PEER_LABELS.get(n, n)}: not measured ({why})" for n, why in nm.items()]
        for n, p in partial.items():
            notes += [f"  {PEER_LABELS.get(n, n)}: {t} failed ({why[:100]})" for t, why in p.get("failed", {}).items()]
        if notes:
            out.append("\n".join(notes))
    matrix = [("django-redisq drain matrix (first to last, tasks/s)", *(SHAPE_LABELS[s] for s, _, _ in DRAIN_SHAPES), "start to first (c1)")]
    for kind in KINDS:
        for lg in LOGGINGS:
            if f"m_{kind}_{lg}_c1" in res.rows:
                matrix.append((f"{KINDS[kind]}, {LOGGINGS[lg]}", *(fmt(m(f"m_{kind}_{lg}_{s}")) for s, _, _ in DRAIN_SHAPES),
                               f"{fmt(m(f'm_{kind}_{lg}_c1_startup'))} s"))
    if "drain_c1_steady" in res.rows:
        matrix.append((f"no-op, no LOGGING (drain rows: {cfg['drain_n']:,}, steady after 5%)", fmt(m("drain_c1_steady")), "-",
                       fmt(m(f"drain_c{cfg['concurrency']}_steady")) if cfg["concurrency"] == 4 else "-", "-", fmt(m("drain_p2_steady")),
                       f"{fmt(m('startup'))} s"))
    if len(matrix) > 1:
        out.append("")
        out.append(_columns(matrix, left=1))
    return "\n".join(out).strip("\n")


def compile_engine() -> None:
    """Write the engine's and the bench app's bytecode, as installing a package does: with PYTHONDONTWRITEBYTECODE
    set, a worker would otherwise compile every module from source at each start (about 0.1 s more than the
    peers, installed by pip with their bytecode, pay)."""
    import compileall

    for d in (ENGINE / "django_redisq", BENCH / "benchapp", BENCH / "peers"):
        with contextlib.suppress(OSError):
            compileall.compile_dir(str(d), quiet=1)
    with contextlib.suppress(OSError):  # the settings and common.py, which every worker of the bench imports too
        compileall.compile_dir(str(BENCH), maxlevels=0, quiet=1)


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


FETCH_STEPS = ("evalsha fetch", "blmove", "lmove", "brpoplpush")
SETTLE_STEPS = ("evalsha ack", "evalsha retry", "evalsha bury")


def _cost_total(out: dict[str, Any], what: str, pas: str = "stats") -> float:
    return float(out[pas]["enqueue"][what] + out[pas]["drain"][what])


def cost_table(runs: list[dict[str, Any]], n: int) -> str:
    """The redis-cost section as a table: per queue and result setting, medians over its runs, then its top commands."""
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    errors: list[str] = []
    for r in runs:
        if "error" in r:
            errors.append(f"  {PEER_LABELS.get(r['who'], r['who'])}: not measured ({r['error']})")
            continue
        groups.setdefault((r["who"], r["results"]), []).append(r)
    switch = {who: any(r["switch"] for r in rs) for (who, _), rs in groups.items()}

    def med(rs: list[dict[str, Any]], pas: str, phase: str, what: str) -> float:
        vals = [float(r[pas][phase][what]) if phase != "whole" else _cost_total(r, what, pas) for r in rs]
        return statistics.median(vals)

    head = ("queue", "results", "CPU us/task: enq", "drain", "whole", "cmd us: enq", "drain", "whole",
            "cmds: enq", "drain", "whole", "top-level cmds", "drain cmd us: fetch", "settle", "other")
    rows: list[tuple[str, ...]] = [head]
    tops: list[str] = []
    for (who, res), rs in groups.items():
        fs = [(sum(u for k, (_, u) in r["slowlog"]["drain"]["by_top"].items() if k.startswith(FETCH_STEPS)),
               sum(u for k, (_, u) in r["slowlog"]["drain"]["by_top"].items() if k.startswith(SETTLE_STEPS)),
               r["slowlog"]["drain"]["cmd_us"]) for r in rs]
        named = any(k.startswith(("evalsha fetch", "evalsha ack")) for r in rs for k in r["slowlog"]["drain"]["by_top"])
        f, st, tot = (statistics.median(x[i] for x in fs) for i in range(3))
        rows.append((who, "on" if res else "off",
                     *(fmt(med(rs, "stats", ph, "cpu_us")) for ph in ("enqueue", "drain", "whole")),
                     *(fmt(med(rs, "slowlog", ph, "cmd_us")) for ph in ("enqueue", "drain", "whole")),
                     *(fmt(med(rs, "stats", ph, "cmds")) for ph in ("enqueue", "drain", "whole")),
                     fmt(med(rs, "slowlog", "whole", "top_cmds")),
                     *((fmt(f), fmt(st), fmt(tot - f - st)) if named else ("n/a", "n/a", "n/a"))))
        if not switch.get(who) and not (who == "django-redisq" and not res):
            rows.append((who, "off" if res else "on", *(["n/a"] * (len(head) - 2))))
        r0 = rs[0]
        top = {}
        for phase in ("enqueue", "drain"):
            for k, (c, u) in r0["slowlog"][phase]["by_top"].items():
                a = top.setdefault(k, [0.0, 0.0])
                a[0] += c
                a[1] += u
        inner: dict[str, list[float]] = {}
        for phase in ("enqueue", "drain"):
            for k, (c, u) in r0["stats"][phase]["by_cmd"].items():
                a = inner.setdefault(k, [0.0, 0.0])
                a[0] += c
                a[1] += u
        t1 = ", ".join(f"{k} {c:.2f}x {u:.1f}us" for k, (c, u) in sorted(top.items(), key=lambda kv: -kv[1][1])[:6] if c >= 0.005)
        t2 = ", ".join(f"{k} {c:.2f}" for k, (c, u) in sorted(inner.items(), key=lambda kv: -kv[1][0])[:8] if c >= 0.005)
        tops.append(f"  {who}, results {'on' if res else 'off'}:\n    top-level, by time (calls and us per task): {t1}"
                    f"\n    all commands, scripts' included, by calls per task: {t2}")
    text = [f"Redis cost per task ({n:,} no-op tasks enqueued one by one, then drained by one worker with its defaults; "
            "medians over runs). CPU: the server's used_cpu_user+sys; cmds: INFO commandstats, commands run inside scripts "
            "included; cmd us and top-level cmds: the top-level commands' own time (slowlog at 0 us, a separate pass), so a "
            "script's inner commands are not counted twice; drain = worker start, fetch, run, settle until the last "
            "completion (the worker's start and idle polls included); fetch/settle: our scripts by name (n/a where "
            "a queue's scripts cannot be named); results n/a: the queue has no such switch", _columns(rows, left=2)]
    text.append("Top commands:\n" + "\n".join(tops))
    if errors:
        text.append("\n".join(errors))
    return "\n".join(text)


SHAPE_NOTES = {
    "dramatiq": "--threads N (2 processes: two `dramatiq --processes 1 --threads 1`)",
    "huey": "-k thread -w N", "rq": "not available: SimpleWorker runs one job at a time (2 processes: two workers)",
    "celery": "-P threads -c N (acks_late=True, no result backend)",
    "arq": "max_jobs N (async jobs, redis.asyncio RPUSH, asyncio.sleep; its default poll_delay 0.5 s)",
    "vtasks": "runworker --concurrency N", "tasks-redis": "not available: one task at a time (2 processes: two workers)",
}


def pool_table(res: Results, cfg: dict[str, Any]) -> str:
    """The pools section as one table (medians): drain rates per workload and pool, then idle latency per pool."""
    m = res.median
    lines = [("workload", "pool", "-c", "tasks/s steady", "start to last ack", "CPU us/task", "cores busy")]
    for wl, pool, conc in dict.fromkeys(POOL_RUNS):
        key = f"pool_{wl}_{pool}_c{conc}"
        if key in res.rows:
            lines.append((f"{WORKLOADS[wl]} ({cfg[f'pool_{wl}_n']:,})", pool, str(conc), fmt(m(f"{key}_steady")), fmt(m(key)),
                          fmt(m(f"{key}_cpu")), fmt(m(f"{key}_cores"))))
    out = _columns(lines)
    if "pool_cpu_ratio" in res.rows:
        out += f"\nCPU-bound, processes -c 2 / threads -c 4: {fmt(m('pool_cpu_ratio'))}x"
        if "pool_cpu_ratio_c2" in res.rows:
            out += f" (/ threads -c 2: {fmt(m('pool_cpu_ratio_c2'))}x)"
        out += " (steady rates, median of per-run ratios)"
    lat = [("pool", "-c", "task", "start p50 ms", "start p99 ms", "ack p50 ms", "ack p99 ms")]
    for pool, conc, name in POOL_LATENCY:
        tag = f"pool_lat_{pool}_{name}"
        if f"{tag}_start_p50" in res.rows:
            lat.append((pool, str(conc), "async def" if name == "astamp" else "sync",
                        *(fmt(m(f"{tag}_{w}_{p}")) for w in ("start", "ack") for p in ("p50", "p99"))))
    if len(lat) > 1:
        out += "\n\n" + _columns(lat)
    return out


def _columns(rows: list[tuple[str, ...]], left: int = 3) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    text = ["  ".join(c.ljust(widths[i]) if i < left else c.rjust(widths[i]) for i, c in enumerate(r)) for r in rows]
    return "\n".join([text[0], "  ".join("-" * w for w in widths), *text[1:]])


def replica_synced(port: int) -> bool:
    """Whether the loopback server on ``port`` is a replica whose link to its master is up."""
    try:
        return redis.Redis(port=port, socket_timeout=2).info("replication").get("master_link_status") == "up"
    except redis.RedisError:
        return False


def fill_local(noop: Any, n: int, queue: str = "default", backend: str = "default") -> None:
    """``n`` calls of ``noop``, in batches of 1000; a tuple of tasks takes turns, 250 calls each (a mix)."""
    mix = noop if isinstance(noop, tuple) else (noop,)
    if (queue, backend) != ("default", "default"):
        mix = tuple(t.using(queue_name=queue, backend=backend) for t in mix)
    step = 250 if len(mix) > 1 else 1000
    for k, start in enumerate(range(0, n, step)):
        mix[k % len(mix)].enqueue_many([((i,), {}) for i in range(start, min(n, start + step))])


def ensure_venv(path: Path, packages: Sequence[str]) -> tuple[Path | None, str]:
    """A virtualenv at ``path`` with ``packages`` (never the project's own environment), built on first use and reused
    while its stamp lists the same packages: (its Python, "") or (None, why not)."""
    py = path / "bin" / "python"
    stamp = path / ".installed"
    want = "\n".join(packages)
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py, ""
    log(f"creating {path}: {', '.join(packages)}")
    try:
        if not py.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(path)
        done = subprocess.run([str(py), "-m", "pip", "install", "-q", *packages], capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot build {path.name}: {exc}"
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        log(f"pip install into {path.name} failed:\n{done.stderr.strip()[-2000:]}")
        return None, f"pip install {' '.join(packages)} failed: {last[:160]}"
    stamp.write_text(want)
    return py, ""


def ours_python() -> Path:
    """The Python our workers run on: ``bench/.ours-venv`` (our runtime dependencies, at this environment's
    versions; the engine comes from PYTHONPATH), or this one when that virtualenv cannot be built."""
    from importlib.metadata import PackageNotFoundError, version

    pins = []
    for dist in OURS_RUNTIME:
        with contextlib.suppress(PackageNotFoundError):
            pins.append(f"{dist}=={version(dist)}")
    py, why = ensure_venv(OURS_VENV, pins)
    if py is None:
        log(f"our workers run in this environment, with its development tools: {why}")
        return Path(sys.executable)
    return py


def ensure_peers_venv() -> Path | None:
    """``bench/.peers-venv`` with Dramatiq, Huey and RQ; None if impossible."""
    py, why = ensure_venv(PEERS_VENV, PEER_PACKAGES)
    if py is None:
        log(f"peers skipped: {why}")
    return py


def peer_python(name: str) -> tuple[Path | None, str]:
    """The Python of the virtualenv that holds ``name`` (built on first use), or None and why not."""
    if name in DJANGO_PEER_PACKAGES:
        py, missing = ensure_django_peers_venv()
        if py is None or name in missing:
            return None, missing.get(name, "no virtualenv")
        return py, ""
    if name in OWN_VENV_PEERS:
        path, packages = OWN_VENV_PEERS[name]
        return ensure_venv(path, packages)
    return ensure_venv(PEERS_VENV, PEER_PACKAGES)


def ensure_django_peers_venv() -> tuple[Path | None, dict[str, str]]:
    """``bench/.django-peers-venv`` with Django 6 and each Django Tasks peer that installs: (its Python, {peer: why not})."""
    py = DJANGO_PEERS_VENV / "bin" / "python"
    stamp = DJANGO_PEERS_VENV / ".installed"
    want = "\n".join(DJANGO_PEER_PACKAGES.values())
    if py.exists() and stamp.exists() and stamp.read_text() == want:
        return py, {}
    missing: dict[str, str] = {}
    try:
        if not py.exists():
            venv.EnvBuilder(with_pip=True, clear=True).create(DJANGO_PEERS_VENV)
        base = subprocess.run([str(py), "-m", "pip", "install", "-q", "Django>=6.0,<6.2", "hiredis"], capture_output=True, text=True,
                              timeout=600)
        if base.returncode != 0:
            return None, dict.fromkeys(DJANGO_PEER_PACKAGES, f"Django 6 does not install: {base.stderr.strip()[-200:]}")
        for name, package in DJANGO_PEER_PACKAGES.items():
            done = subprocess.run([str(py), "-m", "pip", "install", "-q", package], capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                missing[name] = f"pip install {package} failed: {done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ''}"
    except (OSError, subprocess.SubprocessError) as exc:
        return None, dict.fromkeys(DJANGO_PEER_PACKAGES, f"cannot build {DJANGO_PEERS_VENV.name}: {exc}")
    if not missing:
        stamp.write_text(want)
    return py, missing


def engine_fingerprint() -> dict[str, str]:
    """Which engine code was measured: its directory, a hash of its sources, and the repo's commit."""
    import hashlib

    import django_redisq

    pkg = Path(django_redisq.__file__).resolve().parent
    h = hashlib.sha1()
    for f in sorted([*pkg.rglob("*.py"), *pkg.rglob("*.lua")]):
        h.update(str(f.relative_to(pkg)).encode())
        h.update(f.read_bytes())
    return {"engine_dir": str(pkg), "engine_sha1": h.hexdigest()[:12], "repo_commit": git_commit()}


def git_commit() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", "django_redisq"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    return "?"


@contextlib.contextmanager
def terminate_on_signal() -> Iterator[None]:
    """SIGTERM ends the run like Ctrl-C, so every process we started is stopped."""

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller counts, one run each: under 2 minutes (pools: 1.5 more)")
    ap.add_argument("--repeats", type=int, default=None, help="runs of each measurement (default 3, --quick 1)")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help=f"comma-separated sections: {','.join(SECTIONS)} (default: all), and {','.join(OPT_IN_SECTIONS)}")
    ap.add_argument("--skip", default="", help="comma-separated sections to leave out (e.g. peers)")
    ap.add_argument("--redis-config", action="append", default=None, metavar="NAME=VALUE",
                    help="CONFIG SET on the bench's redis-server before anything runs, for every queue measured "
                         "(e.g. hash-max-listpack-value=1024); repeatable")
    ap.add_argument("--peers", default=",".join(PEER_NAMES), help="peers to measure (default: all)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="task kinds of the drain matrix and the peers' drains (default: all)")
    ap.add_argument("--logging", default=",".join(LOGGINGS), help="worker logging of the drain matrix: none, console (default: both)")
    ap.add_argument("--pools", default=",".join(POOL_NAMES), help="execution pools the pools section measures (default: all)")
    ap.add_argument("--drain-n", type=int, default=None, help="tasks queued before each drain (default 20000)")
    ap.add_argument("--worker-verbosity", type=int, default=None,
                    help="runworker -v (default: its own, 1; 2 adds a line per successful task)")
    ap.add_argument("--worker-arg", action="append", default=None, metavar="ARGS",
                    help="more runworker arguments, e.g. --worker-arg=--metrics-port=9808 (repeatable)")
    ap.add_argument("--worker-queues", default=None, metavar="QUEUES",
                    help="the queues a drain worker serves instead of 'default', e.g. \"default:3 low:1\" (weighted order)")
    ap.add_argument("--engine", default=None, metavar="DIR",
                    help="import django_redisq from DIR (e.g. git archive OLD django_redisq | tar -x -C DIR) to compare")
    ap.add_argument("--out", default=None, help="JSON file (default bench/results/<utc time>.json)")
    ap.add_argument("--fill-only", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--fill-queue", default="default", help=argparse.SUPPRESS)
    ap.add_argument("--fill-backend", default="default", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.fill_only is not None:  # a helper process of Bench.fill
        import django

        django.setup()
        from benchapp.tasks import noop

        fill_local(noop, args.fill_only, args.fill_queue, args.fill_backend)
        return 0

    cfg = dict(PROFILES["quick" if args.quick else "full"])
    if args.repeats:
        cfg["repeats"] = args.repeats
    if args.drain_n:
        cfg["drain_n"] = args.drain_n
    only = [s for s in args.only.split(",") if s]
    skip = set(filter(None, args.skip.split(",")))
    unknown = (set(only) | skip) - set(SECTIONS) - set(OPT_IN_SECTIONS)
    if unknown:
        ap.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    bad = {p for p in args.peers.split(",") if p} - set(PEER_NAMES)
    bad |= {k for k in args.kinds.split(",") if k} - set(KINDS)
    bad |= {x for x in args.logging.split(",") if x} - set(LOGGINGS)
    if bad:
        ap.error(f"unknown peer(s), kind(s) or logging: {', '.join(sorted(bad))}")
    args.peers = [p for p in args.peers.split(",") if p]
    args.kinds = [k for k in KINDS if k in args.kinds.split(",")]
    args.logging = [x for x in LOGGINGS if x in args.logging.split(",")]
    bad_pools = set(filter(None, args.pools.split(","))) - set(POOL_NAMES)
    if bad_pools:
        ap.error(f"unknown pool(s): {', '.join(sorted(bad_pools))}")
    args.pools = [p for p in args.pools.split(",") if p]
    sections = [s for s in (*SECTIONS, *OPT_IN_SECTIONS) if s in only and s not in skip]

    started = time.time()
    with terminate_on_signal():
        bench = Bench(args, cfg)
        try:
            info = bench.r.info("server")
            meta = {
                "when": datetime.now(UTC).isoformat(timespec="seconds"), "mode": "quick" if args.quick else "full",
                "config": cfg, "sections": sections, **engine_fingerprint(), "python": platform.python_version(),
                "redis_py": redis.__version__, "redis_server": info.get("redis_version"), "cpus": os.cpu_count(),
                "platform": platform.platform(), "argv": sys.argv[1:], "worker_python": str(bench.worker_python),
                "redis_config": args.redis_config or [],
            }
            log(f"django-redisq bench ({meta['mode']}, {cfg['repeats']} run(s) each) on redis-server {meta['redis_server']} "
                f"at {bench.url}, engine {meta['engine_dir']} ({meta['engine_sha1']}, repo {meta['repo_commit']})")
            meta["loadavg_at_start"] = os.getloadavg()
            if meta["loadavg_at_start"][0] > 1.0:
                log(f"WARNING: the machine is busy before the bench starts (load average {meta['loadavg_at_start'][0]:.1f} "
                    f"on {os.cpu_count()} CPUs): rates will be low and noisy; CPU per task and same-run ratios hold better")
            for section in sections:
                t = time.time()
                try:
                    getattr(bench, section.replace("-", "_"))()
                except Exception as exc:  # noqa: BLE001 - one broken section must not lose the others
                    log(f"section {section} failed: {type(exc).__name__}: {exc}")
                    bench.res.details.setdefault("errors", {})[section] = f"{type(exc).__name__}: {exc}"
                    bench.procs.stop(grace=5)
                    with contextlib.suppress(redis.RedisError):
                        bench.r.flushall()
                bench.res.details.setdefault("section_seconds", {})[section] = round(time.time() - t, 1)
                bench.res.details.setdefault("loadavg_after", {})[section] = os.getloadavg()
            targets = bench.targets()
        finally:
            bench.close()

    meta["seconds"] = round(time.time() - started, 1)
    print()
    print(f"django-redisq bench, {meta['mode']}: {meta['when']}, engine {meta['engine_sha1']} (repo {meta['repo_commit']}), "
          f"Python {meta['python']}, "
          f"redis-py {meta['redis_py']}, redis-server {meta['redis_server']}, {meta['cpus']} CPUs, {meta['seconds']}s")
    load = meta.get("loadavg_at_start", (0.0,))[0]
    if load > 1.0:
        print(f"(machine busy: load average {load:.1f} before the bench started)")
    summary_text = summary_tables(bench.res, cfg, args.peers)
    if summary_text:
        print(summary_text)
        print()
    print(table(bench.res))
    if "pools_table" in bench.res.details:
        print()
        print(bench.res.details["pools_table"])
    if "redis_cost_table" in bench.res.details:
        print()
        print(bench.res.details["redis_cost_table"])
    if "partitions_table" in bench.res.details:
        print()
        print(bench.res.details["partitions_table"])
    if targets:
        print()
        w = max(len(t["target"]) for t in targets)
        for t in targets:
            print(f"{'met ' if t['met'] else 'MISS'}  {t['target'].ljust(w)}  ours {fmt(t['ours'])}  goal {t['goal_text']} = {fmt(t['goal'])}")
    out = Path(args.out) if args.out else BENCH / "results" / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "results": bench.res.as_json(), "targets": targets, "details": bench.res.details},
                              indent=1, default=str))
    print(f"\nJSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
