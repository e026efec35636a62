#!/usr/bin/env python
"""Chaos run: ``python bench/chaos.py [--tasks 20000] [--faults 60] [--duration 300] [--json FILE]``.

Proves invariant 1 (nothing is lost) and the recovery time under fire:

* starts a queue redis-server with ``appendonly yes`` / ``appendfsync always``
  on a fixed loopback port (``RedisServer(appendonly=True)``), and a second,
  fault-free redis-server as the *effects store* (tests/testapp/chaos_tasks.py);
* several producer processes (``bench/chaos.py produce``) enqueue through the
  public API a mix of quick, slow, fail-then-succeed, always-fail, delayed and
  idempotency-keyed tasks, retrying an enqueue that raised;
* several ``manage.py runworker`` processes run them, with the default
  HEARTBEAT_INTERVAL (2 s) and WORKER_TIMEOUT (10 s);
* a chaos loop, bounded in count and time, at random: SIGKILLs a worker and
  starts a new one; SIGTERMs one (warm stop) and starts a new one; kills every
  Redis client connection (``CLIENT KILL TYPE normal``); pauses redis-server
  (SIGSTOP ... SIGCONT); restarts redis-server (SIGTERM, or SIGKILL = crash),
  which reloads its append-only file;
* then waits for every task to settle and prints the table: enqueued,
  finished, dead (only designed failures), lost (must be 0), stuck (must be 0),
  effects that ran more than once (each matched to a fault during that task),
  the faults done, and the longest time from a worker's SIGKILL to its tasks
  starting on another worker (must be at most 15 s).

Every process it starts is stopped by PID at the end. Worker logs are kept in
the run directory it prints. Exit status 0 when every check passes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from django_redisq.testing import RedisServer  # noqa: E402

QUEUES = ("default", "emails")  # chaos_slow runs on "emails", the rest on "default"
PREFIX = "redisq"
KINDS = {"quick": 0.55, "slow": 0.06, "flaky": 0.12, "fail": 0.05, "delayed": 0.12, "order": 0.10}
FAIL_RUNS = 3  # chaos_fail: max_retries=2
RECOVERY_LIMIT = 15.0


@dataclass
class Config:
    tasks: int = 20_000
    producers: int = 3
    workers: int = 3
    concurrency: int = 4
    faults: int = 60
    duration: float = 300.0  # seconds over which producers spread their enqueues
    gap: tuple[float, float] = (2.0, 6.0)  # seconds between faults
    max_pause: float = 3.0  # longest SIGSTOP of redis-server
    settle: float = 180.0  # most seconds to wait, after the chaos, for every task to settle
    seed: int = 1
    slow_seconds: tuple[float, float] = (0.3, 2.0)
    delay_seconds: tuple[float, float] = (0.5, 15.0)
    weights: dict[str, float] = field(default_factory=lambda: {
        "sigkill": 0.30, "sigterm": 0.15, "client_kill": 0.20, "pause": 0.20, "restart": 0.15,
    })
    sequence: list[str] = field(default_factory=list)  # faults in this order (cycled) instead of at random
    kinds: dict[str, float] = field(default_factory=lambda: dict(KINDS))  # the task mix
    workdir: str = ""
    keep: bool = False  # keep the run directory (logs, AOF) after a passing run


@dataclass
class Fault:
    kind: str
    t: float  # wall clock, seconds
    end: float
    target: str = ""
    ids: list[str] = field(default_factory=list)  # SIGKILL: the ids in the dead worker's processing lists


def log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def retrying[T](fn: Callable[[], T], what: str, attempts: int = 60, pause: float = 0.5) -> T:
    """Call ``fn`` until it does not raise a Redis error (bounded)."""
    for i in range(attempts):
        try:
            return fn()
        except (redis.RedisError, OSError) as exc:
            if i == attempts - 1:
                raise RuntimeError(f"{what}: Redis still failing after {attempts} tries: {exc}") from exc
            time.sleep(pause)
    raise AssertionError("unreachable")


class Procs:
    """Worker processes (``runworker``), by name; every one is stopped by PID at the end."""

    def __init__(self, cfg: Config, env: dict[str, str], workdir: Path) -> None:
        self.cfg, self.env, self.workdir = cfg, env, workdir
        self.n = 0
        self.live: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping: dict[str, tuple[subprocess.Popen[bytes], float]] = {}
        self.all: list[subprocess.Popen[bytes]] = []
        self.escalated = 0

    def start(self) -> str:
        self.n += 1
        name = f"chaos-w{self.n}"
        out = open(self.workdir / f"{name}.log", "wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runworker", *QUEUES, "--concurrency", str(self.cfg.concurrency),
             "--name", name, "-v", "0"],
            cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
        )
        out.close()
        self.live[name] = proc
        self.all.append(proc)
        return name

    def poll(self) -> None:
        """Forget stopped workers; SIGKILL one that ignored SIGTERM for too long."""
        for name, proc in list(self.live.items()):
            if proc.poll() is not None:
                log(f"worker {name} exited by itself with {proc.returncode}")
                del self.live[name]
        for name, (proc, since) in list(self.stopping.items()):
            if proc.poll() is not None:
                del self.stopping[name]
            elif time.monotonic() - since > 45:
                proc.kill()
                proc.wait(10)
                self.escalated += 1
                del self.stopping[name]

    def stop_all(self, grace: float = 40.0) -> None:
        for proc in self.all:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.all:
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


class Chaos:
    def __init__(self, cfg: Config, main: RedisServer, procs: Procs, rng: random.Random) -> None:
        self.cfg, self.main, self.procs, self.rng = cfg, main, procs, rng
        self.faults: list[Fault] = []
        self.restarts = 0

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.main.url, decode_responses=True, socket_timeout=15)

    def one(self) -> None:
        if self.cfg.sequence:
            kind = self.cfg.sequence[len(self.faults) % len(self.cfg.sequence)]
        else:
            kinds, weights = zip(*self.cfg.weights.items(), strict=True)
            kind = self.rng.choices(kinds, weights)[0]
        getattr(self, "do_" + kind)()

    def _victim(self, busiest: bool = False) -> str | None:
        names = sorted(self.procs.live)
        if busiest and names:  # the worker holding the most tasks: a kill that costs something
            c = self.client()
            held = retrying(lambda: {n: sum(c.llen(f"{PREFIX}:{{{q}}}:processing:{n}") for q in QUEUES) for n in names}, "llen")
            c.close()
            top = max(held.values())
            names = [n for n in names if held[n] == top]
        return self.rng.choice(names) if names else None

    def do_sigkill(self) -> None:
        name = self._victim(busiest=self.rng.random() < 0.7)
        if name is None:
            return
        proc = self.procs.live.pop(name)
        t = time.time()
        proc.kill()
        proc.wait(10)
        c = self.client()
        ids = retrying(lambda: [i for q in QUEUES for i in c.lrange(f"{PREFIX}:{{{q}}}:processing:{name}", 0, -1)], "read")
        c.close()
        self.faults.append(Fault("sigkill", t, time.time(), name, ids))
        self.procs.start()

    def do_sigterm(self) -> None:
        name = self._victim()
        if name is None:
            return
        proc = self.procs.live.pop(name)
        t = time.time()
        proc.send_signal(signal.SIGTERM)
        self.procs.stopping[name] = (proc, time.monotonic())
        self.faults.append(Fault("sigterm", t, time.time(), name))
        self.procs.start()

    def do_client_kill(self) -> None:
        c = self.client()
        t = time.time()
        killed = retrying(lambda: c.client_kill_filter(_type="normal", skipme=True), "client kill")
        c.close()
        self.faults.append(Fault("client_kill", t, time.time(), str(killed)))

    def do_pause(self) -> None:
        assert self.main.proc is not None
        seconds = self.rng.uniform(0.5, self.cfg.max_pause)
        t = time.time()
        os.kill(self.main.proc.pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(self.main.proc.pid, signal.SIGCONT)
        self.faults.append(Fault("pause", t, time.time(), f"{seconds:.1f}s"))

    def do_restart(self) -> None:
        crash = self.restarts % 2 == 1  # alternate: clean shutdown, then a crash (SIGKILL)
        self.restarts += 1
        t = time.time()
        self.main.stop(signal.SIGKILL if crash else signal.SIGTERM)
        self.main.start()
        self.faults.append(Fault("restart_crash" if crash else "restart", t, time.time()))


def produce(argv: list[str]) -> None:
    """A producer process: enqueue ``--count`` tasks through the public API at ``--rate`` per second."""
    p = argparse.ArgumentParser(prog="chaos.py produce")
    p.add_argument("--index", type=int, required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--rate", type=float, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config", required=True)
    args = p.parse_args(argv)
    cfg = Config(**{k: tuple(v) if k in ("gap", "slow_seconds", "delay_seconds") else v
                    for k, v in json.loads(args.config).items()})
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.worker_settings")
    import django

    django.setup()
    from datetime import timedelta

    from django.utils import timezone

    from tests.testapp import chaos_tasks as ct

    store = ct.effects_store()
    rng = random.Random(args.seed * 1000 + args.index)
    kinds, weights = zip(*cfg.kinds.items(), strict=True)
    orders: list[tuple[str, str]] = []  # (order key, id it got)
    buf: list[tuple[str, str, str]] = []
    stats = Counter()
    start = time.monotonic()

    def flush() -> None:
        pipe = store.pipeline(transaction=False)
        for tid, kind, extra in buf:
            pipe.hset("chaos:kind", tid, kind)
            if extra:
                pipe.hset("chaos:extra", tid, extra)
        pipe.execute()
        buf.clear()

    def enqueue(call: Callable[[], Any]) -> Any:
        for attempt in range(120):  # bounded: about a minute of Redis being away
            try:
                return call()
            except Exception as exc:  # noqa: BLE001 - any failure of enqueue is retried, then counted
                stats["enqueue_errors"] += 1
                if attempt == 0:
                    print(f"producer {args.index}: enqueue raised {type(exc).__name__}: {exc}; retrying", file=sys.stderr)
                time.sleep(0.5)
        stats["enqueue_gave_up"] += 1
        return None

    for i in range(args.count):
        n = args.index * 10_000_000 + i
        kind = rng.choices(kinds, weights)[0]
        extra = ""
        if kind == "quick":
            result = enqueue(lambda n=n: ct.chaos_quick.enqueue(n))
        elif kind == "slow":
            secs = round(rng.uniform(*cfg.slow_seconds), 2)
            result = enqueue(lambda n=n, s=secs: ct.chaos_slow.enqueue(n, s))
        elif kind == "flaky":
            fails = rng.choice([1, 2])
            extra = str(fails)
            result = enqueue(lambda n=n, f=fails: ct.chaos_flaky.enqueue(n, f))
        elif kind == "fail":
            result = enqueue(lambda n=n: ct.chaos_fail.enqueue(n))
        elif kind == "delayed":
            delay = rng.uniform(*cfg.delay_seconds)
            extra = str(int((time.time() + delay) * 1000))
            result = enqueue(lambda n=n, d=delay: ct.chaos_quick.using(run_after=timezone.now() + timedelta(seconds=d)).enqueue(n))
        else:
            key = f"p{args.index}-{i}"
            extra = key
            result = enqueue(lambda key=key: ct.chaos_order.enqueue(key))
            if result is not None:
                orders.append((key, result.id))
            if rng.random() < 0.4:  # an earlier order again (a double click): must get the same task back
                key, first = rng.choice(orders)
                again = enqueue(lambda key=key: ct.chaos_order.enqueue(key))
                stats["order_repeats"] += 1
                if again is not None and again.id != first:
                    stats["order_repeat_new_id"] += 1
                    print(f"producer {args.index}: order {key} enqueued again got {again.id}, first {first}", file=sys.stderr)
        if result is not None:
            buf.append((result.id, kind, extra))
            stats["enqueued"] += 1
        if len(buf) >= 100:
            flush()
        ahead = (i + 1) / args.rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)
    flush()
    store.hset("chaos:producers", str(args.index), json.dumps(stats))


# -- the run ---------------------------------------------------------------------


def run_chaos(cfg: Config) -> dict[str, Any]:
    rng = random.Random(cfg.seed)
    workdir = Path(cfg.workdir or tempfile.mkdtemp(prefix="redisq-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    main = RedisServer(appendonly=True)  # its port is chosen once and kept across restarts
    effects = RedisServer()
    procs: Procs | None = None
    producers: list[subprocess.Popen[bytes]] = []
    try:
        main.start()
        effects.start()
        log(f"queue Redis {main.url} (appendonly, appendfsync always, dir {main.dir}); effects Redis {effects.url}; logs in {workdir}")
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.worker_settings", "REDISQ_TEST_REDIS_URL": main.url,
               "REDISQ_CHAOS_EFFECTS_URL": effects.url}
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        for k in [k for k in env if k.startswith("REDISQ_OPT_")]:
            del env[k]  # default settings: HEARTBEAT_INTERVAL 2 s, WORKER_TIMEOUT 10 s
        procs = Procs(cfg, env, workdir)
        for _ in range(cfg.workers):
            procs.start()
        per = [cfg.tasks // cfg.producers + (1 if i < cfg.tasks % cfg.producers else 0) for i in range(cfg.producers)]
        conf = json.dumps(asdict(cfg))
        for i, count in enumerate(per):
            out = open(workdir / f"producer{i}.log", "wb")
            producers.append(subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "produce", "--index", str(i), "--count", str(count),
                 "--rate", str(max(count / cfg.duration, 0.1)), "--seed", str(cfg.seed), "--config", conf],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            ))
            out.close()
        chaos = Chaos(cfg, main, procs, rng)
        t0 = time.monotonic()
        chaos_until = t0 + cfg.duration + 30
        while len(chaos.faults) < cfg.faults and time.monotonic() < chaos_until:
            time.sleep(rng.uniform(*cfg.gap))
            procs.poll()
            chaos.one()
            f = chaos.faults[-1] if chaos.faults else None
            if f:
                log(f"fault {len(chaos.faults)}/{cfg.faults}: {f.kind} {f.target} {len(f.ids) or ''}")
        chaos_seconds = time.monotonic() - t0
        log(f"chaos done: {len(chaos.faults)} faults in {time.monotonic() - t0:.0f}s; waiting for producers")
        for p in producers:
            try:
                p.wait(max(1.0, cfg.duration + 120 - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        while len(procs.live) < cfg.workers:
            procs.start()
        settled_at, unsettled = wait_settled(main, effects, cfg.settle)
        log(f"settled in {settled_at:.0f}s after the chaos ({unsettled} not settled)")
        procs.poll()
        report = account(main, effects, chaos.faults, workdir)
        report["faults_total"] = len(chaos.faults)
        report["sigterm_escalated_to_kill"] = procs.escalated
        report["settle_seconds"] = round(settled_at, 1)
        report["chaos_seconds"] = round(chaos_seconds, 1)
        report["config"] = asdict(cfg)
        report["workdir"] = str(workdir)
        return report
    finally:
        for p in producers:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        if procs is not None:
            procs.stop_all()
        if main.proc and main.proc.poll() is None:
            os.kill(main.proc.pid, signal.SIGCONT)
        main.cleanup()
        effects.cleanup()


def _states(c: redis.Redis, ids: list[str], kinds: dict[str, str]) -> list[tuple[str | None, str | None]]:
    out: list[tuple[str | None, str | None]] = []
    for i in range(0, len(ids), 2000):
        pipe = c.pipeline(transaction=False)
        for tid in ids[i: i + 2000]:
            q = "emails" if kinds.get(tid) == "slow" else "default"
            pipe.hmget(f"{PREFIX}:{{{q}}}:t:{tid}", "state", "reason")
        out.extend(tuple(x) for x in pipe.execute())
    return out


def wait_settled(main: RedisServer, effects: RedisServer, limit: float) -> tuple[float, int]:
    """Wait until every enqueued task is finished or dead (bounded by ``limit`` seconds)."""
    c = redis.Redis.from_url(main.url, decode_responses=True, socket_timeout=15)
    e = redis.Redis.from_url(effects.url, decode_responses=True)
    start = time.monotonic()
    unsettled = -1
    try:
        while time.monotonic() - start < limit:
            kinds = e.hgetall("chaos:kind")
            ids = sorted(kinds)
            states = retrying(lambda ids=ids, kinds=kinds: _states(c, ids, kinds), "states")
            unsettled = sum(s not in ("finished", "dead") for s, _ in states)
            if unsettled == 0:
                break
            time.sleep(2)
        return time.monotonic() - start, unsettled
    finally:
        c.close()
        e.close()


def account(main: RedisServer, effects: RedisServer, faults: list[Fault], workdir: Path) -> dict[str, Any]:
    c = redis.Redis.from_url(main.url, decode_responses=True, socket_timeout=15)
    e = redis.Redis.from_url(effects.url, decode_responses=True)
    kinds = e.hgetall("chaos:kind")
    extra = e.hgetall("chaos:extra")
    eff = {k: int(v) for k, v in e.hgetall("chaos:effects").items()}
    attempts = {k: int(v) for k, v in e.hgetall("chaos:attempts").items()}
    orders = {k: int(v) for k, v in e.hgetall("chaos:orders").items()}
    prod = Counter()
    for v in e.hgetall("chaos:producers").values():
        prod.update(json.loads(v))
    starts: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for entry in e.lrange("chaos:starts", 0, -1):
        tid, ms, worker, _pid = entry.split("|")
        starts[tid].append((int(ms) / 1000, worker))
    ids = sorted(kinds)
    places: dict[str, list[str]] = defaultdict(list)
    for q in QUEUES:
        base = f"{PREFIX}:{{{q}}}:"
        for tid in c.lrange(base + "pending", 0, -1):
            places[tid].append("pending")
        for tid in c.zrange(base + "scheduled", 0, -1):
            places[tid].append("scheduled")
        for tid in c.zrange(base + "dead", 0, -1):
            places[tid].append("dead")
        for key in c.scan_iter(match=base + "processing:*", count=1000):
            for tid in c.lrange(key, 0, -1):
                places[tid].append("processing")
    states = dict(zip(ids, _states(c, ids, kinds), strict=True))
    r: dict[str, Any] = {"enqueued": len(ids), "by_kind": dict(Counter(kinds.values()))}
    finished = [i for i in ids if states[i][0] == "finished" and not places.get(i)]
    dead = [i for i in ids if places.get(i) == ["dead"] and states[i][0] == "dead"]
    designed = [i for i in dead if kinds[i] == "fail" and states[i][1] == "failed"]
    stuck = [i for i in ids if any(p in ("pending", "scheduled", "processing") for p in places.get(i, []))
             or states[i][0] in ("pending", "scheduled", "running")]
    lost = [i for i in ids if not places.get(i) and states[i][0] not in ("finished", "dead")]
    twice = [i for i in ids if len(places.get(i, [])) > 1]
    r.update(finished=len(finished), dead=len(dead), dead_designed=len(designed), dead_undesigned=len(dead) - len(designed),
             fail_tasks=sum(k == "fail" for k in kinds.values()), lost=len(lost), stuck=len(stuck), in_two_places=len(twice))
    r["examples"] = {"lost": lost[:10], "stuck": [(i, places.get(i), states[i]) for i in stuck[:10]],
                     "undesigned_dead": [(i, kinds[i], states[i][1]) for i in dead if i not in designed][:10]}
    # effects: each finished task's effect ran; more than once only with a fault during that task
    no_effect = [i for i in finished if kinds[i] != "fail" and eff.get(i, 0) == 0]
    r["finished_without_effect"] = len(no_effect)
    r["examples"]["finished_without_effect"] = no_effect[:10]
    redis_faults = [f for f in faults if f.kind in ("restart", "restart_crash", "client_kill", "pause")]
    kills = [f for f in faults if f.kind == "sigkill"]

    def explain(tid: str) -> str | None:
        runs = sorted(starts.get(tid, []))
        if len(runs) < 2:
            return None
        for f in kills:
            if any(w == f.target and t <= f.t for t, w in runs[:-1]):
                return "sigkill"
        for f in redis_faults:
            if runs[0][0] - 1 <= f.t <= runs[-1][0]:
                return f.kind
        return None

    dup = [i for i in ids if eff.get(i, 0) > 1]
    explained = Counter(explain(i) for i in dup)
    r["effects_more_than_once"] = len(dup)
    r["effects_more_than_once_by_fault"] = {k: v for k, v in explained.items() if k}
    r["effects_more_than_once_unexplained"] = explained.get(None, 0)
    r["examples"]["unexplained_duplicates"] = [(i, kinds[i], sorted(starts.get(i, []))) for i in dup if explain(i) is None][:10]
    # designed failures ran exactly FAIL_RUNS times unless a fault explains more
    over = [i for i in ids if kinds[i] == "fail" and attempts.get(i, 0) > FAIL_RUNS and explain(i) is None]
    r["fail_extra_runs_unexplained"] = len(over)
    order_keys = {extra[i] for i in ids if kinds[i] == "order"}
    r["orders"] = len(order_keys)
    r["order_effects_more_than_once"] = sum(orders.get(k, 0) > 1 for k in order_keys)
    per_key = Counter(extra[i] for i in ids if kinds[i] == "order")
    r["order_keys_with_two_tasks"] = sum(n > 1 for n in per_key.values())  # the idempotency key let a second task in
    r["order_repeats"] = prod.get("order_repeats", 0)
    r["order_repeat_got_new_id"] = prod.get("order_repeat_new_id", 0)
    r["enqueue_errors_retried"] = prod.get("enqueue_errors", 0)
    r["enqueue_gave_up"] = prod.get("enqueue_gave_up", 0)
    r["ran_but_not_recorded_by_producer"] = len(set(attempts) - set(kinds))  # enqueue raised, yet the task was stored
    # recovery: from a worker's SIGKILL to each of its tasks starting on another worker
    rec: list[float] = []
    clean_rec: list[float] = []
    never = 0
    for f in kills:
        for tid in f.ids:
            later = [t for t, w in starts.get(tid, []) if t >= f.t and w != f.target]
            if not later:
                never += 1  # e.g. settled by the 'success' guard, or a designed failure already finished
                continue
            d = min(later) - f.t
            rec.append(d)
            if not any(f.t - 1 <= g.t <= f.t + d for g in redis_faults):
                clean_rec.append(d)
    r["sigkills_with_tasks"] = sum(bool(f.ids) for f in kills)
    r["tasks_held_by_killed_workers"] = sum(len(f.ids) for f in kills)
    r["killed_tasks_not_rerun"] = never
    r["recovery_max_s"] = round(max(rec), 2) if rec else None
    r["recovery_median_s"] = round(sorted(rec)[len(rec) // 2], 2) if rec else None
    r["recovery_max_without_redis_fault_s"] = round(max(clean_rec), 2) if clean_rec else None
    r["recovery_samples"] = f"{len(rec)} ({len(clean_rec)} without a Redis fault)"
    r["faults"] = dict(Counter(f.kind for f in faults))
    logs = Counter()
    for path in workdir.glob("chaos-w*.log"):
        text = path.read_text(errors="replace")
        logs["thread_crashes"] += text.count("Exception in thread")
        logs["tracebacks"] += text.count("Traceback (most recent call last)")
        logs["lease_lost_warnings"] += text.count("no longer held")
        logs["reap_warnings"] += text.count("reaped worker")
        logs["fetch_reply_lost_handbacks"] += text.count("fetch reply was lost")
    r["worker_logs"] = dict(logs)
    r["fault_log"] = [asdict(f) | {"ids": len(f.ids)} for f in faults]
    c.close()
    e.close()
    return r


def checks(r: dict[str, Any]) -> list[str]:
    """The claims; each failing one is a line of the returned list."""
    bad = []
    for key in ("lost", "stuck", "in_two_places", "dead_undesigned", "finished_without_effect",
                "effects_more_than_once_unexplained", "fail_extra_runs_unexplained", "order_repeat_got_new_id",
                "order_keys_with_two_tasks",
                "enqueue_gave_up"):
        if r.get(key):
            bad.append(f"{key} = {r[key]}")
    if r["finished"] + r["dead"] != r["enqueued"]:
        bad.append(f"finished + dead = {r['finished'] + r['dead']} != enqueued {r['enqueued']}")
    if r["dead_designed"] != r["fail_tasks"]:
        bad.append(f"designed failures dead {r['dead_designed']} != always-fail tasks {r['fail_tasks']}")
    if r["recovery_max_without_redis_fault_s"] is not None and r["recovery_max_without_redis_fault_s"] > RECOVERY_LIMIT:
        bad.append(f"recovery {r['recovery_max_without_redis_fault_s']} s > {RECOVERY_LIMIT} s")
    if r["worker_logs"].get("thread_crashes"):
        bad.append(f"worker threads crashed: {r['worker_logs']['thread_crashes']}")
    return bad


def table(r: dict[str, Any]) -> str:
    f = r["faults"]
    rows = [
        ("tasks enqueued (returned by enqueue)", r["enqueued"]),
        ("  by kind", ", ".join(f"{k} {v}" for k, v in sorted(r["by_kind"].items()))),
        ("finished", r["finished"]),
        ("dead letters", r["dead"]),
        ("  designed failures (always-fail tasks)", f"{r['dead_designed']} of {r['fail_tasks']}"),
        ("  undesigned (must be 0)", r["dead_undesigned"]),
        ("lost (must be 0)", r["lost"]),
        ("stuck after the reaper window (must be 0)", r["stuck"]),
        ("in two places at once (must be 0)", r["in_two_places"]),
        ("finished without its effect (must be 0)", r["finished_without_effect"]),
        ("effects that ran more than once", r["effects_more_than_once"]),
        ("  explained by a fault during the task", ", ".join(f"{k} {v}" for k, v in r["effects_more_than_once_by_fault"].items()) or "-"),
        ("  unexplained (must be 0)", r["effects_more_than_once_unexplained"]),
        ("order effects more than once (counted above too)", r["order_effects_more_than_once"]),
        ("orders that got two tasks (must be 0)", r["order_keys_with_two_tasks"]),
        ("order re-enqueued / got a new task (must be 0)", f"{r['order_repeats']} / {r['order_repeat_got_new_id']}"),
        ("enqueue calls that raised and were retried", r["enqueue_errors_retried"]),
        ("  stored although enqueue raised", r["ran_but_not_recorded_by_producer"]),
        ("faults injected", r["faults_total"]),
        ("  worker SIGKILL / SIGTERM", f"{f.get('sigkill', 0)} / {f.get('sigterm', 0)}"),
        ("  CLIENT KILL (all connections)", f.get("client_kill", 0)),
        ("  redis-server SIGSTOP pauses", f.get("pause", 0)),
        ("  redis-server restarts clean / crash", f"{f.get('restart', 0)} / {f.get('restart_crash', 0)}"),
        ("tasks held by SIGKILLed workers", f"{r['tasks_held_by_killed_workers']} (in {r['sigkills_with_tasks']} kills)"),
        ("death -> running elsewhere: max (median)", f"{r['recovery_max_s']} s ({r['recovery_median_s']} s)"),
        ("  max, no Redis fault in the window (<= 15 s)", f"{r['recovery_max_without_redis_fault_s']} s"),
        ("  samples (tasks)", r["recovery_samples"]),
        ("worker log: thread crashes / reaps / lease lost", "{} / {} / {}".format(
            r["worker_logs"].get("thread_crashes", 0), r["worker_logs"].get("reap_warnings", 0),
            r["worker_logs"].get("lease_lost_warnings", 0))),
        ("  fetch replies lost, tasks handed back", r["worker_logs"].get("fetch_reply_lost_handbacks", 0)),
        ("chaos / settle time", f"{r['chaos_seconds']} s / {r['settle_seconds']} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def main(argv: list[str]) -> int:
    if argv[:1] == ["produce"]:
        produce(argv[1:])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=Config.tasks)
    p.add_argument("--producers", type=int, default=Config.producers)
    p.add_argument("--workers", type=int, default=Config.workers)
    p.add_argument("--concurrency", type=int, default=Config.concurrency)
    p.add_argument("--faults", type=int, default=Config.faults)
    p.add_argument("--duration", type=float, default=Config.duration, help="seconds over which tasks are enqueued")
    p.add_argument("--settle", type=float, default=Config.settle)
    p.add_argument("--seed", type=int, default=Config.seed)
    p.add_argument("--workdir", default="")
    p.add_argument("--json", default="", help="also write the report here")
    a = p.parse_args(argv)
    cfg = Config(tasks=a.tasks, producers=a.producers, workers=a.workers, concurrency=a.concurrency, faults=a.faults,
                 duration=a.duration, settle=a.settle, seed=a.seed, workdir=a.workdir)
    started = time.time()
    report = run_chaos(cfg)
    report["wall_seconds"] = round(time.time() - started, 1)
    print(table(report))
    bad = checks(report)
    for line in bad:
        print("FAILED:", line)
    for k, v in report["examples"].items():
        if v:
            print(f"  {k}: {v}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1, default=str))
    if not bad and not cfg.workdir:
        shutil.rmtree(report["workdir"], ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
