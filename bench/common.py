"""Measurement helpers shared by ``bench/run.py`` and the peer adapters (``bench/peers/``).

Only the standard library and redis-py: the peers run in their own virtualenv
and import this file by path, so every queue is timed by the same code.
Every loop here is bounded in count and in time.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import redis

POLL = 0.01  # seconds between two reads of a done counter (one Redis command each)


# -- statistics ---------------------------------------------------------------


START_KEY = "bench:start"
_start_client: redis.Redis | None = None


def record_start(x: int) -> int:
    """The latency task of every queue measured: push ``"<x> <time.time()>"`` to START_KEY, return ``x``.

    The start time is taken first, so the extra RPUSH is outside the measured interval.
    """
    started = time.time()
    global _start_client
    if _start_client is None:
        _start_client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"], protocol=2)
    _start_client.rpush(START_KEY, f"{x} {started!r}")
    return x


RPUSH_KEY = "bench:rpush"
SLEEP_S = 0.001
_rpush_client: redis.Redis | None = None
_arpush_client: Any = None


def rpush_one(x: int) -> int:
    """The "one Redis round trip" task body of every queue measured: ``RPUSH bench:rpush x`` on the bench's redis-server.

    One client per worker process, created on first use (redis-py's pool is thread-safe).
    """
    global _rpush_client
    if _rpush_client is None:
        _rpush_client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"], protocol=2)
    _rpush_client.rpush(RPUSH_KEY, x)
    return x


async def arpush_one(x: int) -> int:
    """``rpush_one`` for an asyncio-only queue (arq): the same command with one ``redis.asyncio`` client per process."""
    global _arpush_client
    if _arpush_client is None:
        import redis.asyncio as aredis

        _arpush_client = aredis.Redis.from_url(os.environ["BENCH_REDIS_URL"], protocol=2)
    await _arpush_client.rpush(RPUSH_KEY, x)
    return x


def sleep_one(x: int) -> int:
    """The I/O stand-in task body: ``time.sleep(0.001)``."""
    time.sleep(SLEEP_S)
    return x


async def asleep_one(x: int) -> int:
    """``sleep_one`` for an asyncio-only queue (arq): ``await asyncio.sleep(0.001)``, as its users would write it."""
    import asyncio

    await asyncio.sleep(SLEEP_S)
    return x


def percentile(values: Sequence[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100) of a non-empty sequence."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(runs: Sequence[float]) -> dict[str, Any]:
    vals = [float(v) for v in runs if v is not None]
    if not vals:
        return {"runs": [], "median": None, "min": None, "max": None}
    return {"runs": vals, "median": statistics.median(vals), "min": min(vals), "max": max(vals)}


def rate_loop(fn: Callable[[int], Any], count: int, seconds: float) -> dict[str, float]:
    """Call ``fn(i)`` for i in 0..count-1, stopping early after ``seconds``: calls per second."""
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    for i in range(count):
        fn(i)
        done += 1
        if (i & 63) == 63 and time.perf_counter() > deadline:
            break
    elapsed = time.perf_counter() - start
    return {"calls": done, "seconds": elapsed, "per_s": done / elapsed if elapsed else 0.0}


# -- processes ----------------------------------------------------------------


class Procs:
    """Child processes, each in its own session so it is stopped with its children by its own id."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
              log: Path | None = None) -> subprocess.Popen[bytes]:
        out = open(log, "ab") if log else subprocess.DEVNULL  # closed below: the child keeps its own copy
        try:
            p = subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                 start_new_session=True)
        finally:
            if log:
                out.close()  # the child holds its own descriptor
        self.procs.append(p)
        return p

    def stop(self, procs: Sequence[subprocess.Popen[bytes]] | None = None, grace: float = 10.0) -> None:
        """SIGTERM each process group we started, wait up to ``grace`` seconds, then SIGKILL it."""
        targets = list(self.procs if procs is None else procs)
        live = [p for p in targets if p.poll() is None]
        for p in live:
            _signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in live:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in live:
            if p.poll() is None:  # still running after the grace time: the group goes at once
                _signal_group(p.pid, signal.SIGKILL)
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    pass
        for p in targets:
            if p in self.procs:
                self.procs.remove(p)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def vmrss_kb(pid: int) -> int | None:
    """Resident memory of a process in KiB (``VmRSS`` of /proc/<pid>/status)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# -- drains -------------------------------------------------------------------


def watch_drain(done: Callable[[], int], n: int, t0: float, cap: float, alive: Callable[[], bool] | None = None,
                marks: Sequence[int] = (), on_mark: Callable[[int], None] | None = None,
                cpu: dict[str, Callable[[], float | None]] | None = None) -> dict[str, Any]:
    """Poll ``done()`` until it reaches ``n`` (or ``cap`` seconds after ``t0``).

    Returns the wall rate from ``t0`` (worker start) to the last completion, the
    steady rate after the first 5 % (start-up excluded), the rate from the first
    completion seen to the last (``active_per_s``: the worker's rate under a
    backlog, start-up excluded), and the start-up time (worker start to the first
    completion seen, ``startup_s``).
    ``on_mark(k)`` is called once ``done()`` first reaches each of ``marks``.
    ``cpu`` maps names to CPU-seconds counters (e.g. the worker's, Redis's):
    their use per task over the same steady span is returned as ``<name>_cpu_us``,
    a figure that other load on the machine disturbs far less than a rate.
    """
    first_t = None
    first_d = 0
    warm: tuple[float, int, dict[str, float | None]] | None = None
    pending_marks = sorted(marks)
    warm_at = max(1, n // 20)
    d, now = 0, t0
    capped = False
    probes = cpu or {}
    while True:
        d = done()
        now = time.perf_counter()
        if d > 0 and first_t is None:
            first_t, first_d = now, d
        if warm is None and d >= warm_at:
            warm = (now, d, {k: f() for k, f in probes.items()})
        while pending_marks and d >= pending_marks[0]:
            if on_mark:
                on_mark(pending_marks[0])
            pending_marks.pop(0)
        if d >= n:
            break
        if now - t0 > cap:
            capped = True
            break
        if alive is not None and not alive():
            raise RuntimeError(f"worker exited after {d} of {n} tasks")
        time.sleep(POLL)
    end_cpu = {k: f() for k, f in probes.items()}
    wall = now - t0
    out: dict[str, Any] = {
        "done": d, "n": n, "seconds": wall, "per_s": d / wall if wall else 0.0, "steady_per_s": None,
        "startup_s": (first_t - t0) if first_t else None, "capped": capped,
        "active_per_s": (d - first_d) / (now - first_t) if first_t is not None and now > first_t and d > first_d else None,
    }
    if warm is not None and now > warm[0] and d > warm[1]:
        out["steady_per_s"] = (d - warm[1]) / (now - warm[0])
        for k, v in end_cpu.items():
            w = warm[2].get(k)
            out[f"{k}_cpu_us"] = (v - w) / (d - warm[1]) * 1e6 if v is not None and w is not None else None
    return out


def group_cpu_seconds(pgids: Sequence[int]) -> float | None:
    """User+system CPU seconds of every live process in the given process groups (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, found = 0, False
    want = set(pgids)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if int(fields[2]) in want:  # pgrp
            total += int(fields[11]) + int(fields[12])  # utime, stime
            found = True
    return total / tick if found else None


def redis_cpu_seconds(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# -- latency ------------------------------------------------------------------


def start_latency(enqueue: Callable[[int], Any], r: redis.Redis, key: str, samples: int, warmup: int = 10,
                  gap: float = 0.005, timeout: float = 5.0, wait_done: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Enqueue one task at a time on an idle worker; the task RPUSHes ``"<i> <time.time()>"`` to ``key`` at start.

    ``wait_done`` (optional) blocks until the task is acked and returns True, so
    enqueue->ack is measured too. ``gap`` seconds of idleness between tasks.
    """
    r.delete(key)
    starts, acks, calls = [], [], []
    lost = 0
    deadline = time.monotonic() + timeout * 4 + samples * (gap + 0.05)  # bounded whatever happens
    for i in range(warmup + samples):
        if time.monotonic() > deadline:
            break
        t0 = time.time()
        enqueue(i)
        t1 = time.time()
        acked = None
        if wait_done is not None:  # the ack comes after the start stamp: wait for it, then read the stamp
            if not wait_done():
                lost += 1
                continue
            acked = time.time()
        got = r.blpop([key], timeout=timeout)
        if got is None:
            lost += 1
            continue
        raw = got[1] if isinstance(got[1], str) else got[1].decode()
        which, started = raw.split()
        if which != str(i):  # a stamp of an earlier, lost sample: start afresh
            lost += 1
            r.delete(key)
            continue
        if i >= warmup:
            starts.append((float(started) - t0) * 1000)
            calls.append((t1 - t0) * 1000)
            if acked is not None:
                acks.append((acked - t0) * 1000)
        time.sleep(gap)
    out: dict[str, Any] = {"samples": len(starts), "lost": lost}
    if starts:
        out.update(start_p50_ms=percentile(starts, 50), start_p99_ms=percentile(starts, 99),
                   enqueue_call_p50_ms=percentile(calls, 50))
    if acks:
        out.update(ack_p50_ms=percentile(acks, 50), ack_p99_ms=percentile(acks, 99))
    return out


def emit(data: dict[str, Any]) -> None:
    """The last line of a peer adapter's output: its results as JSON."""
    print("RESULT " + json.dumps(data), flush=True)


# -- enqueue from a thread and from an event loop ------------------------------


def enqueue_modes(enqueue: Callable[[int], Any], aenqueue: Callable[[int], Any], *, count: int, seconds: float,
                  concurrency: int, rounds: int, hop: Callable[[int], Any] | None = None, uvloop: bool = False) -> dict[str, list[float]]:
    """Tasks/s of one backend's enqueue, the modes alternated in each round so a change of load hits all alike.

    ``thread``: ``enqueue(i)`` in a loop, in a plain thread (no event loop in it).
    ``loop``: ``await aenqueue(i)`` one after the other on a running event loop.
    ``gather``: ``concurrency`` ``aenqueue`` calls at once (``asyncio.gather``), batch after batch.
    ``hop-loop``, ``hop-gather``: the same with ``hop`` (another aenqueue, e.g. Django's default through a thread).
    ``uvloop`` (``uvloop=True``): ``loop`` on uvloop instead of asyncio's own loop.
    Each round of a mode runs in a fresh thread or ``asyncio.run`` with one untimed call first (the pool is warm).
    """
    import asyncio
    import threading

    def in_thread() -> float:
        out: list[float] = []

        def body() -> None:
            enqueue(-1)
            out.append(rate_loop(enqueue, count, seconds)["per_s"])

        t = threading.Thread(target=body)
        t.start()
        t.join()
        return out[0]

    async def one_by_one(aenqueue: Callable[[int], Any] = aenqueue) -> float:
        await aenqueue(-1)
        done, start = 0, time.perf_counter()
        deadline = start + seconds
        for i in range(count):
            await aenqueue(i)
            done += 1
            if (i & 63) == 63 and time.perf_counter() > deadline:
                break
        return done / (time.perf_counter() - start)

    async def gathered(aenqueue: Callable[[int], Any] = aenqueue) -> float:
        await aenqueue(-1)
        done, start = 0, time.perf_counter()
        deadline = start + seconds
        while done < count and time.perf_counter() < deadline:
            await asyncio.gather(*(aenqueue(done + j) for j in range(concurrency)))
            done += concurrency
        return done / (time.perf_counter() - start)

    run: dict[str, Callable[[], float]] = {
        "thread": in_thread, "loop": lambda: asyncio.run(one_by_one()), "gather": lambda: asyncio.run(gathered()),
    }
    if uvloop:  # the loop uvicorn runs on when it is installed
        import uvloop as uv

        run["uvloop"] = lambda: uv.run(one_by_one())
    if hop is not None:
        run["hop-loop"] = lambda: asyncio.run(one_by_one(hop))
        run["hop-gather"] = lambda: asyncio.run(gathered(hop))
    modes = list(run)
    rates: dict[str, list[float]] = {m: [] for m in modes}
    for rnd in range(rounds):
        order = list(modes) if rnd % 2 == 0 else list(reversed(modes))
        for m in order:
            rates[m].append(run[m]())
    return rates


# -- what a task costs the Redis server ------------------------------------------

COST_CLIENT = "bench-cost"
"""The name of the measuring client: its own commands (probes, INFO, SLOWLOG) are left out of every figure."""
OWN_COMMANDS = frozenset({"info", "config|resetstat", "config|set", "config|get", "slowlog|get", "slowlog|reset", "flushall",
                          "client|setname", "multi", "exec", "ping", "hello"})


def cost_client(url: str) -> redis.Redis:
    """A client named ``COST_CLIENT``, replies not decoded (a slowlog entry may hold a peer's pickled bytes)."""
    r = redis.Redis.from_url(url, protocol=2)
    r.client_setname(COST_CLIENT)
    return r


def command_stats(r: redis.Redis) -> dict[str, tuple[int, int]]:
    """``INFO commandstats``: {command: (calls, usec)}, commands run inside scripts included."""
    return {k[len("cmdstat_"):]: (int(v["calls"]), int(v["usec"])) for k, v in r.info("commandstats").items()}


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _slowlog_label(args: list[str], scripts: dict[str, str]) -> str:
    """One top-level command as the breakdown names it: ``evalsha <script>`` (by name when known), ``fcall <fn>``, else the command."""
    name = args[0].lower() if args else "?"
    if name in ("evalsha", "evalsha_ro") and len(args) > 1:
        sha = args[1].lower()
        key = f", {args[3]}" if len(args) > 3 and args[2] != "0" else ""
        return f"{name} {scripts.get(sha) or sha[:8] + key}"
    if name in ("eval", "eval_ro") and len(args) > 1:
        import hashlib

        return f"{name} {scripts.get(hashlib.sha1(args[1].encode()).hexdigest()) or 'script ' + hashlib.sha1(args[1].encode()).hexdigest()[:8]}"
    if name in ("fcall", "fcall_ro") and len(args) > 1:
        return f"{name} {args[1]}"
    return name


class CostMeter:
    """What a phase of a queue's work costs the Redis server, from the server itself.

    ``measure(run, per)`` resets ``INFO commandstats``, reads ``used_cpu_user + used_cpu_sys`` before and after
    ``run()``, and returns per unit of ``per`` (tasks): server CPU us, commands (inside scripts included) and
    their calls and usec by command. With ``slowlog=True`` it instead logs every top-level command
    (``slowlog-log-slower-than 0``, collected between polls in MULTI so none is lost): the usec of the
    top-level commands only (a script's time includes the commands it runs, which commandstats and the
    slowlog count again; those run by a script are left out by their address), by command and by script. That pass costs the server CPU to log, so its
    CPU figure is not kept. The measuring client's own commands (``COST_CLIENT``) are left out: those
    named in ``OWN_COMMANDS`` in the commandstats pass, by client name in the slowlog pass; ``probe_cmds``
    (what one ``probe()`` sends, from ``probe_cost``) times the probes counted is subtracted too.
    """

    def __init__(self, r: redis.Redis, scripts: dict[str, str] | None = None) -> None:
        self.r = r
        self.scripts = scripts or {}
        self.slowlog = False
        self._entries: list[tuple[str, int]] = []
        self.probes = 0

    def probe_cost(self, probe: Callable[[], Any]) -> dict[str, int]:
        """The commands one ``probe()`` sends (on an idle server)."""
        self.r.config_resetstat()
        probe()
        return {k: c for k, (c, _) in command_stats(self.r).items() if k not in OWN_COMMANDS}

    def collect(self) -> None:
        if not self.slowlog:
            return
        pipe = self.r.pipeline(transaction=True)
        pipe.execute_command("SLOWLOG", "GET", "-1")
        pipe.execute_command("SLOWLOG", "RESET")
        raw = pipe.execute()[0]
        for e in raw:  # [id, time, usec, [args], addr, name]; a command a script runs has the address "?:0"
            addr, name = (_text(e[4]), _text(e[5])) if len(e) > 5 else ("", "")
            if name == COST_CLIENT or addr in ("?:0", ""):
                continue
            self._entries.append((_slowlog_label([_text(a) for a in e[3]], self.scripts), int(e[2])))

    def measure(self, run: Callable[[], Any], per: int, slowlog: bool = False,
                probe_cmds: dict[str, int] | None = None) -> dict[str, Any]:
        r = self.r
        self.slowlog, self._entries, self.probes = slowlog, [], 0
        if slowlog:
            r.config_set("slowlog-max-len", 100_000)
            r.config_set("slowlog-log-slower-than", 0)
            r.execute_command("SLOWLOG", "RESET")
        r.config_resetstat()
        cpu0 = redis_cpu_seconds(r)
        try:
            run()
            cpu1 = redis_cpu_seconds(r)
            stats = command_stats(r)
            self.collect()
        finally:
            if slowlog:
                r.config_set("slowlog-log-slower-than", 10_000)
                r.config_set("slowlog-max-len", 128)
                r.execute_command("SLOWLOG", "RESET")
            self.slowlog = False
        per = max(1, per)
        if slowlog:
            by: dict[str, list[float]] = {}
            for label, usec in self._entries:
                row = by.setdefault(label, [0, 0])
                row[0] += 1
                row[1] += usec
            return {"top_cmds": len(self._entries) / per, "cmd_us": sum(u for _, u in self._entries) / per,
                    "by_top": {k: (c / per, u / per) for k, (c, u) in sorted(by.items(), key=lambda kv: -kv[1][1])}}
        for k, c in (probe_cmds or {}).items():
            if k in stats:
                calls, usec = stats[k]
                left = max(0, calls - c * self.probes)
                stats[k] = (left, int(usec * left / calls) if calls else 0)
        stats = {k: v for k, v in stats.items() if k not in OWN_COMMANDS and v[0]}
        return {"cpu_us": (cpu1 - cpu0) / per * 1e6, "cmds": sum(c for c, _ in stats.values()) / per,
                "by_cmd": {k: (c / per, u / per) for k, (c, u) in sorted(stats.items(), key=lambda kv: -kv[1][1])}}

    def wait_done(self, done: Callable[[], int], n: int, cap: float, alive: Callable[[], bool] | None = None,
                  every: float = 0.1) -> bool:
        """Poll ``done()`` every ``every`` s until ``n`` (False after ``cap`` s); collects the slowlog between polls."""
        deadline = time.monotonic() + cap
        while True:
            self.probes += 1
            if done() >= n:
                return True
            if time.monotonic() > deadline:
                return False
            if alive is not None and not alive():
                raise RuntimeError("a worker exited before the drain ended")
            self.collect()
            time.sleep(every)


def task_cost(meter: CostMeter, *, enqueue: Callable[[int], Any], n: int, start: Callable[[], Any], stop: Callable[[], Any],
              done: Callable[[], int], reset: Callable[[], Any], cap: float, alive: Callable[[], bool] | None = None) -> dict[str, Any]:
    """One queue's Redis cost per task, in two passes of ``n`` tasks each: enqueue one by one, then a worker drains them.

    Pass 1 (commandstats, server CPU) and pass 2 (slowlog: top-level command time, scripts by name) each
    ``reset()`` the data, enqueue ``n`` (``enqueue(i)``), then ``start()`` the worker and wait until
    ``done() >= n``; the worker's start and its idle polls until the last completion are in the drain phase.
    """
    probe_cmds = meter.probe_cost(done)
    out: dict[str, Any] = {"n": n, "probe_cmds": probe_cmds}
    for slow in (False, True):
        reset()

        def fill(slow: bool = slow) -> None:
            for i in range(n):
                enqueue(i)
                if slow and (i & 511) == 511:
                    meter.collect()

        enq = meter.measure(fill, n, slowlog=slow)
        finished: list[bool] = []

        def drain(finished: list[bool] = finished) -> None:
            start()
            finished.append(meter.wait_done(done, n, cap, alive))

        try:
            dr = meter.measure(drain, n, slowlog=slow, probe_cmds=probe_cmds)
        finally:
            stop()
        if not finished or not finished[0]:
            raise RuntimeError(f"drain of {n} did not finish within {cap:.0f}s (done {done()})")
        out["slowlog" if slow else "stats"] = {"enqueue": enq, "drain": dr}
    return out
