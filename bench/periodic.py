#!/usr/bin/env python
"""Periodic tasks under fire: ``python bench/periodic.py [--duration 130] [--json FILE]``.

Proves invariant 11 (docs/explanation/architecture.md) for schedules: three ``runworker`` processes serve
three one-second schedules, one per catch-up policy (``latest``, ``skip``,
``all``), on a redis-server with ``appendonly yes`` / ``appendfsync always``
that this script starts on a loopback port, while it, in turn: SIGKILLs a
worker and starts a new one, SIGSTOPs a worker past WORKER_TIMEOUT (2 s here),
restarts redis-server once, and stops every worker for a few seconds (the
only window in which ticks may be missed). Then it counts, per schedule, every
tick of the window from the task ids (one per schedule and tick) and the
effects the tasks record:

* enqueued twice (must be 0: a tick's id is unique, so this counts ticks whose
  marker says fired more than their ids);
* ran twice (only a task running when its worker was SIGKILLed may);
* missed while a worker was alive (must be 0; the ticks while redis-server
  restarts, or does not answer for over half a second (an fsync on a busy
  disk), are counted apart: no one can enqueue them then, and ``all`` must
  catch them up);
* in the no-worker gap, what the catch-up policy says: ``skip`` runs none of
  the gap's ticks, ``latest`` at most the newest one, ``all`` every one.

Exit status 0 when every check passes. Every process is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from django_redisq.testing import RedisServer  # noqa: E402

POLICIES = ("latest", "skip", "all")
SCHEDULES = {
    f"fleet-{p}": {"task": "tests.testapp.tasks.on_tick", "every": 1, "kwargs": {"key": p}, "timezone": "UTC", "catch_up": p}
    for p in POLICIES
}
TICKS = "test:ticks"
PREFIX = "redisq:{default}:"


def log(msg: str) -> None:
    print(f"[periodic {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def id_base(name: str) -> str:
    import hashlib

    return "p" + hashlib.sha256(f"default:{name}".encode()).hexdigest()[:12] + "-"


class Fleet:
    def __init__(self, url: str, workdir: Path) -> None:
        self.env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.worker_settings", "REDISQ_TEST_REDIS_URL": url,
                    "REDISQ_SCHEDULES": json.dumps(SCHEDULES), "REDISQ_OPT_HEARTBEAT_INTERVAL": "0.5",
                    "REDISQ_OPT_WORKER_TIMEOUT": "2", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.workdir, self.n = workdir, 0
        self.live: list[subprocess.Popen[bytes]] = []
        self.all: list[subprocess.Popen[bytes]] = []

    def start(self, *extra: str) -> subprocess.Popen[bytes]:
        self.n += 1
        with open(self.workdir / f"worker-{self.n}.log", "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "django", "runworker", "-c", "2", "-v", "0", *extra],
                                    cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        self.all.append(proc)
        if "--burst" not in extra:
            self.live.append(proc)
        return proc

    def stop_all(self, sig: int = signal.SIGTERM, wait: float = 30.0) -> None:
        for p in self.all:
            if p.poll() is None:
                p.send_signal(sig)
        deadline = time.monotonic() + wait
        for p in self.all:
            while p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            if p.poll() is None:
                p.kill()
                p.wait(10)
        self.live = []


def redis_ms(c: redis.Redis) -> int:
    sec, usec = c.time()
    return int(sec) * 1000 + int(usec) // 1000


class StallProbe(threading.Thread):
    """Asks redis-server for its TIME every 50 ms and records, in Redis ms, each stretch in which it did not answer
    for over half a second: with ``appendfsync always`` on a machine whose disk is busy with other work, an fsync
    can hold the server for seconds, and no scheduler can enqueue a tick then (seen: heartbeats timing out, two
    ticks missed). Such a stretch counts as the restart does; a restart is one too."""

    STALL_MS = 500

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stalls: list[tuple[int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        c = redis.Redis.from_url(self.url, socket_timeout=30, socket_connect_timeout=2)
        last = None
        while not self.stop.wait(0.05):
            t0 = time.monotonic()
            try:
                now = redis_ms(c)
            except (redis.ConnectionError, redis.TimeoutError):
                continue  # down (the restart): the next answer closes the stretch
            if last is not None and time.monotonic() - t0 > self.STALL_MS / 1000:  # asked after `last`, answered at `now`
                self.stalls.append((last, now))
            last = now
        c.close()


def run(duration: float, workdir: Path) -> dict[str, Any]:
    server = RedisServer(appendonly=True)
    server.start()
    fleet = Fleet(server.url, workdir)
    c = redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=15)
    faults: list[tuple[str, int, int]] = []  # kind, Redis ms start, end
    probe: StallProbe | None = None
    try:
        for _ in range(3):
            fleet.start()
        # the window starts once every schedule has fired a tick, not after a fixed sleep: on a loaded machine
        # setting up Django took more than 4 s, and the window's first tick was counted missed while alive
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(
                int(c.hget(PREFIX + f"sched:fleet-{policy}", "fired") or 0) for policy in POLICIES):
            time.sleep(0.05)
        probe = StallProbe(server.url)
        probe.start()
        start = redis_ms(c)
        log(f"window starts; redis {server.url}; logs in {workdir}")
        step = duration / 6
        plan = ["sigkill", "freeze", "restart_redis", "gap", "sigkill", "freeze"]
        for kind in plan:
            time.sleep(step * 0.6)
            t0 = redis_ms(c)
            if kind == "sigkill":
                victim = fleet.live.pop(0)
                victim.kill()
                victim.wait(10)
                fleet.start()
            elif kind == "freeze":
                victim = fleet.live[0]
                os.kill(victim.pid, signal.SIGSTOP)
                time.sleep(3.5)
                os.kill(victim.pid, signal.SIGCONT)
            elif kind == "restart_redis":
                server.stop(signal.SIGTERM)
                server.start()
                c = redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=15)
            elif kind == "gap":
                for p in fleet.live:
                    p.send_signal(signal.SIGTERM)
                for p in fleet.live:
                    p.wait(30)
                fleet.live = []
                time.sleep(6)
                for _ in range(3):
                    fleet.start()
                # the gap ends when a new worker is registered (its scheduler claims from then on), not when
                # its process starts: on a loaded machine setting up Django can take seconds
                deadline = time.monotonic() + 60
                while not c.zcard(PREFIX + "workers") and time.monotonic() < deadline:
                    time.sleep(0.05)
            t1 = redis_ms(c)
            faults.append((kind, t0, t1))
            log(f"{kind}: {(t1 - t0) / 1000:.1f} s")
            time.sleep(step * 0.4)
        end = redis_ms(c)
        # the window's last ticks are fired up to a second late on a loaded machine (a scheduler claims a tick
        # once it is due, on its next wake-up): the workers keep running a while before they stop, or a tick
        # just before the end would be counted missed while a worker was alive (seen: the last one or two)
        time.sleep(3)
        probe.stop.set()
        probe.join(40)
        faults.extend(("redis_stall", t0, t1) for t0, t1 in probe.stalls if start <= t1 and t0 <= end)
        log("window ends; stopping workers, draining what is pending")
        fleet.stop_all()
        drain = fleet.start("--burst", "--no-scheduler")
        drain.wait(120)
        return count(c, start, end, faults)
    finally:
        if probe is not None:
            probe.stop.set()
        fleet.stop_all(signal.SIGKILL, 5)
        server.stop()
        server.cleanup()


def count(c: redis.Redis, start: int, end: int, faults: list[tuple[str, int, int]]) -> dict[str, Any]:
    gap = next((t0, t1) for kind, t0, t1 in faults if kind == "gap")
    runs: dict[tuple[str, int], int] = {}
    for field, n in c.hgetall(TICKS).items():
        key, tick = field.split("|", 1)
        runs[(key, int(datetime.fromisoformat(tick).timestamp() * 1000))] = int(n)
    report: dict[str, Any] = {"window_s": (end - start) / 1000, "faults": [f[0] for f in faults], "schedules": {}}
    for policy in POLICIES:
        name = f"fleet-{policy}"
        base = id_base(name)
        ids = [k.rsplit("-", 1)[1] for k in c.scan_iter(match=f"{PREFIX}t:{base}*", count=1000)]
        enqueued = sorted(int(t) for t in ids if t.isdigit())
        marker = c.hgetall(PREFIX + f"sched:{name}")
        expected = list(range((start + 999) // 1000 * 1000, end // 1000 * 1000 + 1, 1000))
        # the gap: from the last worker stopping to the first new one claiming (its ticks are the policy's)
        in_gap = [t for t in expected if gap[0] + 1000 < t <= gap[1] - 1000]
        # while redis-server restarts no one can enqueue: its ticks are the policy's, as the gap's (on an idle
        # machine the restart takes well under a second and misses none; under load it took 3 s)
        down = [t for t in expected if any(t0 < t <= t1 + 1000 for kind, t0, t1 in faults if kind in ("restart_redis", "redis_stall"))]
        # a tick due in the second before the gap began may be fired late (as at the window's end, below) by a worker
        # being stopped for the gap: no worker fires it then, as none does in the gap (seen under load: the tick just
        # before the gap's start, on the latest and skip policies; "all" ran it after the gap)
        alive = [t for t in expected if t not in in_gap and t not in down and not gap[0] - 1000 <= t <= gap[1] + 3000]
        got = set(enqueued)
        report["schedules"][policy] = row = {
            "ticks expected": len(expected),
            "enqueued once": sum(1 for t in expected if t in got),
            "enqueued twice": max(0, int(marker.get("fired", 0)) - len(enqueued)),
            "ran once": sum(1 for t in expected if runs.get((policy, t)) == 1),
            "ran twice": sum(1 for t in expected if runs.get((policy, t), 0) > 1),
            "missed while a worker was alive": sum(1 for t in alive if t not in got),
            "ticks while Redis restarted or stalled": len(down),
            "of them run": sum(1 for t in down if t in got),
            "gap ticks": len(in_gap),
            "gap ticks run": sum(1 for t in in_gap if t in got),
            "missed (counted by the schedule)": int(marker.get("missed", 0)),
            "enqueued but never ran": sum(1 for t in enqueued if start <= t <= end and (policy, t) not in runs),
        }
        log(f"{policy}: {row}")
        missed = [t for t in alive if t not in got]
        if missed:  # where in the window, beside the faults: what a failure needs to be explained
            log(f"{policy}: missed while alive at s {[round((t - start) / 1000, 1) for t in missed]}; faults at s "
                + ", ".join(f"{kind} {(t0 - start) / 1000:.1f}-{(t1 - start) / 1000:.1f}" for kind, t0, t1 in faults))
    return report


def checks(report: dict[str, Any]) -> list[str]:
    bad = []
    for policy, row in report["schedules"].items():
        for key in ("enqueued twice", "missed while a worker was alive", "enqueued but never ran"):
            if row[key]:
                bad.append(f"{policy}: {key} = {row[key]}")
        if row["ran twice"] > 2:  # at most the task running in each SIGKILLed worker
            bad.append(f"{policy}: ran twice = {row['ran twice']}")
        gap, run_ = row["gap ticks"], row["gap ticks run"]
        if policy == "skip" and run_:
            bad.append(f"skip ran {run_} of the gap's ticks")
        if policy == "latest" and run_ > 1:
            bad.append(f"latest ran {run_} of the gap's ticks (at most the newest)")
        if policy == "all" and run_ != gap:
            bad.append(f"all ran {run_} of the gap's {gap} ticks")
        if policy == "all" and row["of them run"] != row["ticks while Redis restarted or stalled"]:
            bad.append(f"all ran {row['of them run']} of the {row['ticks while Redis restarted or stalled']} ticks while Redis "
                       "restarted or stalled")
    return bad


def table(report: dict[str, Any]) -> str:
    rows = list(next(iter(report["schedules"].values())))
    lines = [f"window {report['window_s']:.0f} s of Redis time; faults: {', '.join(report['faults'])}",
             f"{'':34}" + "".join(f"{p:>10}" for p in POLICIES)]
    for r in rows:
        lines.append(f"{r:34}" + "".join(f"{report['schedules'][p][r]:>10}" for p in POLICIES))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=130.0, help="seconds of faults after the first ticks (default 130)")
    ap.add_argument("--workdir", default="", help="where worker logs go (default: a temporary directory)")
    ap.add_argument("--json", default="", help="also write the report here")
    args = ap.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="redisq-periodic-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report = run(args.duration, workdir)
    print(table(report))
    problems = checks(report)
    for p in problems:
        print("FAIL", p)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
