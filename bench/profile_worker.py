#!/usr/bin/env python
"""Profile a real ``runworker --burst`` draining N queued no-op tasks, with py-spy, and say where the time goes.

    python bench/profile_worker.py                 # 60,000 tasks, --concurrency 1, wall-clock view
    python bench/profile_worker.py --cpu           # only samples of threads on a CPU
    python bench/profile_worker.py --worker-verbosity 0
    python bench/profile_worker.py --task rpush --logging console --concurrency 4   # a task doing one round trip
    python bench/profile_worker.py --engine DIR    # another copy of django_redisq (see run.py --engine)

py-spy (``pip install py-spy``) starts the worker as its child (attaching to a
running process is not allowed in some containers). Samples are grouped per
thread and turned into microseconds per task: in the wall-clock view a
thread's samples stand for the measured steady wall time per task, in the
``--cpu`` view all samples stand for the worker's measured CPU time per task.
Writes the raw stacks and the summary to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path

import run  # bench/run.py: the throwaway server, settings and fill helpers
from common import redis_cpu_seconds, tail, watch_drain

RESULTS = run.BENCH / "results"


def parse(raw: Path) -> dict[str, Counter[tuple[str, ...]]]:
    """Collapsed stacks per thread name: ``{thread: Counter({(frame, ...): samples})}``."""
    threads: dict[str, Counter[tuple[str, ...]]] = defaultdict(Counter)
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        head = frames[0]
        name = head.split(": ", 1)[1] if ": " in head else head
        name = name.rstrip("0123456789") + "*" if name.startswith(("redisq-exec-", "redisq-fetch-")) else name
        threads[name][tuple(_short(f) for f in frames[1:])] += int(count)
    return threads


def _short(frame: str) -> str:
    """``func (path/to/file.py:123)`` -> ``func (file.py)``: one row per function, not per line."""
    func, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = path.split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 and parts[-2] in ("django_redisq", "redis", "_parsers", "logging") else parts[-1]
    return f"{func} ({short})" if short else func


def summarize(threads: dict[str, Counter[tuple[str, ...]]], *, cpu_mode: bool, wall_us: float, cpu_us: float | None,
              top: int) -> str:
    """Per thread, the share of samples of each function, in microseconds per task.

    Wall mode (``--idle``): every thread is sampled all its life, so a thread's
    samples stand for the drain's wall time per task (``wall_us``). CPU mode:
    all on-CPU samples of the process together stand for its CPU time per task
    (``cpu_us``).
    """
    out = []
    total = sum(sum(c.values()) for c in threads.values())
    out.append("samples per thread: " + ", ".join(f"{t} {sum(c.values())}" for t, c in sorted(threads.items(), key=lambda x: -sum(x[1].values()))))
    for tname, stacks in sorted(threads.items(), key=lambda x: -sum(x[1].values())):
        samples = sum(stacks.values())
        if not samples or samples < total * 0.03:
            continue
        if cpu_mode:
            scale = (cpu_us or 0.0) / total  # us per task that one sample stands for
            what = f"{samples / total:.1%} of the process's CPU samples = {samples * scale:.1f} us CPU per task"
        else:
            scale = wall_us / samples
            what = f"{samples} samples over its life = {wall_us:.1f} us wall per task"
        incl: Counter[str] = Counter()
        leaf: Counter[str] = Counter()
        for frames, cnt in stacks.items():
            for f in set(frames):
                incl[f] += cnt
            if frames:
                leaf[frames[-1]] += cnt
        out.append("")
        out.append(f"== thread {tname}: {what}")
        out.append(f"{'inclusive':>9}  {'us/task':>8}  function")
        for f, cnt in incl.most_common(top):
            out.append(f"{cnt / samples:9.1%}  {cnt * scale:8.1f}  {f}")
        out.append(f"{'self':>9}  {'us/task':>8}  function (leaf: where the thread was)")
        for f, cnt in leaf.most_common(max(10, top // 2)):
            out.append(f"{cnt / samples:9.1%}  {cnt * scale:8.1f}  {f}")
    return "\n".join(out)


def child_pid(parent: int, timeout: float = 30.0) -> int | None:
    """The first child process of ``parent`` (the worker that py-spy started)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2:].split()[1]) == parent:
                    return int(entry.name)
        time.sleep(0.02)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=60_000, help="tasks queued before the worker starts")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--blocking", action="store_true", help="let py-spy pause the worker for each sample (slower, exact stacks)")
    ap.add_argument("--cpu", action="store_true", help="leave out idle threads (default: wall clock, idle included)")
    ap.add_argument("--worker-verbosity", type=int, default=None, help="runworker -v (default: its own, 1: a log line per task)")
    ap.add_argument("--engine", default=None, metavar="DIR", help="import django_redisq from DIR")
    ap.add_argument("--task", default="noop", choices=["noop", "rpush", "sleep"],
                    help="the task drained: the no-op, one Redis round trip (RPUSH), or time.sleep(0.001)")
    ap.add_argument("--logging", default=None, choices=["none", "console"], help="BENCH_LOGGING for the worker (bench_settings)")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()

    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        return 2
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(exist_ok=True)
    raw = RESULTS / f"profile-{stamp}.raw"
    report = RESULTS / f"profile-{stamp}.txt"
    bench = run.Bench(argparse.Namespace(worker_verbosity=args.worker_verbosity, worker_queues=None, worker_arg=[], redis_config=None),
                      dict(run.PROFILES["quick"]))
    try:
        bench.fill(args.n, producers=2, task=None if args.task == "noop" else bench.workloads[args.task])
        if args.logging:
            bench.env["BENCH_LOGGING"] = args.logging
        argv = [spy, "record", "-r", str(args.rate), "-f", "raw", "-o", str(raw), "--threads"]
        if not args.cpu:
            argv.append("--idle")
        if not args.blocking:
            argv.append("--nonblocking")
        argv += ["--", *bench.worker_argv(["default"], args.concurrency, args.worker_verbosity), "--burst"]
        log = bench.logdir / "worker.log"
        t0 = time.perf_counter()
        spy_proc = bench.procs.start(argv, env=bench.env, cwd=run.BENCH, log=log)
        worker = child_pid(spy_proc.pid)
        if worker is None:
            print(f"the worker did not start:\n{tail(log)}", file=sys.stderr)
            return 1
        drain = watch_drain(bench.processed, args.n, t0, 600, alive=lambda: spy_proc.poll() is None,
                                cpu={"worker": lambda: process_cpu_seconds(worker), "redis": lambda: redis_cpu_seconds(bench.r)})
        try:
            spy_proc.wait(120)  # --burst: the worker leaves once drained, then py-spy writes its file
        except subprocess.TimeoutExpired:
            bench.procs.stop([spy_proc], grace=20)
        if not raw.exists():
            print(f"py-spy wrote nothing ({spy_proc.returncode}):\n{tail(log)}", file=sys.stderr)
            return 1
    finally:
        bench.close()
    meta = run.engine_fingerprint()
    steady = drain["steady_per_s"] or drain["per_s"]
    wall_us = 1e6 / steady * args.concurrency
    head = (f"profile of runworker --burst --concurrency {args.concurrency} -v {args.worker_verbosity if args.worker_verbosity is not None else 1} "
            f"draining {drain['done']:,} {args.task} tasks, LOGGING {args.logging or 'as set'} "
            f"({'on-CPU samples' if args.cpu else 'wall clock, idle threads included'}, "
            f"py-spy {args.rate} Hz {'blocking' if args.blocking else 'nonblocking'}), engine {meta['engine_dir']} "
            f"({meta['engine_sha1']}, repo {meta['repo_commit']})\n"
            f"under the profiler: steady {steady:,.0f} tasks/s = {wall_us:.1f} us wall per task per executor; "
            f"worker CPU {drain.get('worker_cpu_us') or 0:.1f} us/task, Redis CPU {drain.get('redis_cpu_us') or 0:.1f} us/task")
    text = head + "\n" + summarize(parse(raw), cpu_mode=args.cpu, wall_us=wall_us, cpu_us=drain.get("worker_cpu_us"), top=args.top)
    report.write_text(text + "\n")
    print(text)
    print(f"\nraw stacks: {raw}\nsummary: {report}")
    return 0


def process_cpu_seconds(pid: int) -> float | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    sys.exit(main())
