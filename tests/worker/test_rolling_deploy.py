"""A rolling deploy across each restructure: into connection/, store/, worker/, ops/ and admin/, then into
feature packages (settings/, schedules/, events/, workflows/, core/) and a composed store.

Each restructure promised an unchanged key schema, settings and message format, so
that during a rolling deploy a worker of the layout before and one of the new can
share a queue and nothing is lost. Only real processes of both versions on one
Redis prove that: the old package is taken from the repository's own history
(``OLD_LAYOUTS``: the last commit before each restructure), an old worker and a new
one drain the same queues while an old producer and the new code enqueue into
them, and the old worker is SIGKILLed mid-run so the new one must recover what
it held. The application code (``tests.testapp``, the settings) is the same for
both, as in a deploy where only the library changes.
"""

from __future__ import annotations

import inspect
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from django_redisq.compat import TaskResultStatus, task_backends
from tests.conftest import ROOT, WORKER_ENV, WorkerProcess
from tests.helpers import held_by, keys, redis_ms, wait_for, where_is
from tests.testapp.tasks import EFFECTS

OLD_LAYOUTS = {
    "flat": ("b979ab9", "broker.py", "store"),  # django_redisq/broker.py, worker.py, ... side by side
    "root-modules": ("fa3b33e", "workflow_result.py", "core"),  # 31 modules at the root, a Broker of mixins
}
"""Per layout: the last commit of it, a module only it has at the package root, a package only the new layout has."""
OLD, NEW = "oldlayout", "newlayout"
"""The workers' ``--name``s: their ids are ``<name>.<suffix>``, which tells who ran a task (``worker_ids``)."""
QUEUES = ("default", "emails")
FAST = {"REDISQ_OPT_HEARTBEAT_INTERVAL": "0.5", "REDISQ_OPT_WORKER_TIMEOUT": "3"}
"""A dead worker is reaped after 3 s instead of 10: the recovery fits the test's time."""
KILL_AFTER = 200
"""Effects recorded before the old worker is killed: over 40 % of the 460 the two producers' tasks make, so that
the old worker has run tasks of both producers, and the new one has much left to take over."""

PRELUDE = """\
import importlib.util, os, sys
import django_redisq
origin = os.path.dirname(os.path.abspath(django_redisq.__file__))
old = importlib.util.find_spec("django_redisq." + os.environ["REDISQ_OLD_MARKER"]) is not None
print(f"django_redisq from {origin} (old layout: {old})", flush=True)
if origin != os.path.join(os.environ["REDISQ_OLD_ROOT"], "django_redisq") or not old:
    sys.exit("this process did not import the old django_redisq it was started to run")
"""
"""Run first in every old-layout process: it proves, in that very interpreter, which package it imported."""

OLD_WORKER = PRELUDE + """\
from django.core.management import execute_from_command_line
execute_from_command_line(["django", "runworker", *sys.argv[1:]])
"""


def enqueue_mix(prefix: str) -> list[list[str]]:
    """Enqueue the test's mix in rounds, a short pause apart, so the workers drain while it is enqueued.

    Run as is by both producers: in-process by the new code, and, its source sent
    with ``python -c``, by the old package. Returns ``[kind, key, task id]`` rows:
    ``counted`` (priorities 20, 0 and -20), ``delayed`` (run_after 0.5 to 4 s ahead,
    so some fall due after the kill), ``flaky`` (fails once, then succeeds on its
    retry), ``slow`` (0.4 s on its first run: what a worker is holding when killed)
    and ``charge`` (an idempotency key both producers enqueue: one task for both).
    """
    import time
    from datetime import timedelta

    from django.utils import timezone

    from tests.testapp import tasks

    rounds, counted, delayed, flaky, slow, charges = 10, 100, 40, 40, 20, 20
    rows: list[list[str]] = []
    for rnd in range(rounds):
        mine = [i for i in range(counted) if i % rounds == rnd]
        for priority in (20, 0, -20):
            batch = [f"{prefix}c{i}" for i in mine if (0, 20, -20)[i % 3] == priority]
            done = tasks.counted.using(priority=priority).enqueue_many([([k], {}) for k in batch])
            rows += [["counted", k, res.id] for k, res in zip(batch, done, strict=True)]
        for i in (i for i in range(delayed) if i % rounds == rnd):
            key = f"{prefix}d{i}"
            res = tasks.counted.using(run_after=timezone.now() + timedelta(seconds=0.5 + (i % 8) * 0.5)).enqueue(key)
            rows.append(["delayed", key, res.id])
        batch = [f"{prefix}f{i}" for i in range(flaky) if i % rounds == rnd]
        rows += [["flaky", k, res.id] for k, res in zip(batch, tasks.flaky.enqueue_many([([k, 1], {}) for k in batch]), strict=True)]
        batch = [f"{prefix}s{i}" for i in range(slow) if i % rounds == rnd]
        done = tasks.slow_first_time.enqueue_many([([k, 0.4], {}) for k in batch])
        rows += [["slow", k, res.id] for k, res in zip(batch, done, strict=True)]
        orders = [i for i in range(charges) if i % rounds == rnd]
        rows += [["charge", f"charge:{i}", res.id] for i, res in zip(orders, tasks.charge.enqueue_many([([i], {}) for i in orders]), strict=True)]
        time.sleep(0.1)
    return rows


OLD_PRODUCER = PRELUDE + f"""\
import json
import django
django.setup()
{textwrap.dedent(inspect.getsource(enqueue_mix))}
print("ENQUEUEING", flush=True)
print("ROWS " + json.dumps(enqueue_mix("o-")), flush=True)
"""


@pytest.fixture(params=sorted(OLD_LAYOUTS))
def old_package(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The django_redisq of an old layout's last commit, from the repository's own history, in a directory of its own.

    Skips, saying exactly why, when that history is not at hand (no git, not a
    checkout, a shallow clone); a full clone, as CI makes, always has it.
    """
    commit, marker, new_only = OLD_LAYOUTS[request.param]
    monkeypatch.setenv("REDISQ_OLD_MARKER", marker.removesuffix(".py"))
    why = f"cannot compare with the {request.param} layout: django_redisq as of commit {commit} must come from {ROOT}'s git history"
    git = shutil.which("git")
    if git is None:
        pytest.skip(f"{why}, and git is not on PATH")
    inside = subprocess.run([git, "-C", str(ROOT), "rev-parse", "--git-dir"], capture_output=True, text=True)
    if inside.returncode != 0:
        pytest.skip(f"{why}, and {ROOT} is not a git checkout ({inside.stderr.strip()})")
    found = subprocess.run([git, "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True, text=True)
    if found.returncode != 0:
        shallow = subprocess.run([git, "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True, text=True)
        hint = " (a shallow clone: `git fetch --unshallow` brings it)" if shallow.stdout.strip() == "true" else ""
        pytest.skip(f"{why}, and commit {commit} is not in this clone{hint}")
    archive = subprocess.run([git, "-C", str(ROOT), "archive", "--format=tar", commit, "django_redisq"], capture_output=True)
    assert archive.returncode == 0, archive.stderr.decode(errors="replace")
    with tempfile.TemporaryDirectory(prefix="redisq-old-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        package = Path(tmp, "django_redisq")
        # the premise: this commit really has that layout
        assert (package / marker).is_file() and not (package / new_only).exists()
        yield Path(tmp)


class OldLayoutProcess(WorkerProcess):
    """A Python process of the test settings whose ``import django_redisq`` finds the old package.

    ``python -m`` and ``python -c`` put their working directory first on sys.path,
    so the process runs in the old package's directory, which PYTHONPATH also puts
    before the repository (where ``tests`` is found); the suite's WorkerProcess runs
    in the repository, where the new package would win. ``code`` starts with PRELUDE.
    Its output goes to ``log`` (stderr only, when ``stdout`` is a pipe), so ``output``
    works as for a WorkerProcess.
    """

    def __init__(self, url: str, old_root: Path, code: str, *args: str, env: dict[str, str] | None = None,
                 stdout: Any = None) -> None:
        full_env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.worker_settings", "REDISQ_TEST_REDIS_URL": url,
                    **WORKER_ENV, **(env or {}), "REDISQ_OLD_ROOT": str(old_root)}
        full_env["PYTHONPATH"] = os.pathsep.join([str(old_root), str(ROOT), full_env.get("PYTHONPATH", "")])
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], cwd=old_root, env=full_env,
            stdout=stdout or self.log, stderr=subprocess.STDOUT if stdout is None else self.log, text=True,
        )


def _printed(wp: WorkerProcess) -> str:
    """What a process printed so far, without waiting for it to end."""
    wp.log.seek(0)
    return wp.log.read()


def _workers(r: Any, name: str) -> list[str]:
    return [w for w in r.zrange(keys("default").workers, 0, -1) if w.startswith(name + ".")]


def _held(r: Any, name: str) -> list[str]:
    return [i for q in QUEUES for i in held_by(r, name, q)]


def _returned(kind: str, key: str, value: Any) -> bool:
    """Whether a task returned what its kind returns once it succeeded."""
    if kind == "slow":
        return value == key
    if kind == "flaky":  # its retry; a third run when the old worker died after the retry ran, before its ack
        return value in ("ok after 2", "ok after 3")
    if kind == "charge":
        return value == int(key.removeprefix("charge:"))
    return isinstance(value, int) and value >= 1  # counted: its run's count


def _expected_effects(rows: list[list[str]]) -> Counter[str]:
    """Each key's runs when every task ran once: a flaky task twice (its failure, then its retry)."""
    want: Counter[str] = Counter()
    for kind, key, _ in rows:
        if kind == "flaky":
            want[key] = 2
        elif kind == "slow":
            want[key] = want[key + ":start"] = 1
        else:
            want[key] = 1
    return want


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_old_and_new_layout_workers_share_queues_through_a_sigkill(r, redis_url, run_worker_process, old_package):
    """Old and new producers, old and new workers, one queue: every task runs once, the new worker recovers the old's.

    Exactly once holds except for a task in the killed worker's hands (its
    processing lists at the kill), which may run once more: at-least-once, as in
    the invariant tests. Mixing is proved, not assumed: each version's worker runs
    tasks each version's producer enqueued, and the tasks the old one held end on
    the new one.
    """
    started = time.monotonic()
    worker_args = (*QUEUES, "--concurrency", "4")
    old = OldLayoutProcess(redis_url, old_package, OLD_WORKER, *worker_args, "--name", OLD, env=FAST)
    mine = [old]  # ended here; run_worker_process ends the new worker
    try:
        new = run_worker_process(*worker_args, "--name", NEW, env=FAST)
        assert wait_for(lambda: _workers(r, OLD) and _workers(r, NEW), timeout=30), (
            f"both workers should register; old printed:\n{_printed(old)}")
        old_id = _workers(r, OLD)[0]
        # the worker registered under the old name is the process started on the old package
        assert json.loads(r.get(keys("default").worker_info(old_id)))["pid"] == old.proc.pid
        assert f"django_redisq from {old_package / 'django_redisq'} (old layout: True)" in _printed(old)

        # both producers start together once the old one is set up; the new code enqueues from a thread of
        # this process, so that the old worker is killed while both are still enqueuing
        producer = OldLayoutProcess(redis_url, old_package, OLD_PRODUCER, stdout=subprocess.PIPE)
        mine.append(producer)
        printed = [producer.proc.stdout.readline() for _ in range(2)]
        assert printed == [f"django_redisq from {old_package / 'django_redisq'} (old layout: True)\n", "ENQUEUEING\n"], (
            printed, _printed(producer))
        with ThreadPoolExecutor(1) as pool:
            new_producer = pool.submit(enqueue_mix, "n-")

            # SIGKILL the old worker mid-run: much of the work done, and tasks in its hands
            assert wait_for(lambda: r.hlen(EFFECTS) >= KILL_AFTER and len(_held(r, OLD)) >= 2, timeout=20), (
                f"the old worker should be holding tasks mid-run; old printed:\n{_printed(old)}")
            old.proc.send_signal(signal.SIGKILL)
            old.proc.wait(5)
            killed_at = redis_ms(r)
            orphaned = _held(r, OLD)
            assert orphaned, "the old worker held no task when killed"
            done_before = r.hlen(EFFECTS)
            new_rows = new_producer.result(timeout=30)
        out, _ = producer.proc.communicate(timeout=30)
        assert producer.proc.returncode == 0, _printed(producer)
        old_rows = json.loads(out.rsplit("ROWS ", 1)[1])
        rows = old_rows + new_rows
        ids = {task_id for _, _, task_id in rows}
        produced_by = {task_id: side for side, part in (("old", old_rows), ("new", new_rows))
                       for kind, _, task_id in part if kind != "charge"}
        # one idempotency key, one task, whichever version enqueued first
        charges = {side: {key: task_id for kind, key, task_id in part if kind == "charge"}
                   for side, part in (("old", old_rows), ("new", new_rows))}
        assert charges["old"] == charges["new"] and len(set(charges["new"].values())) == 20
        want = _expected_effects(rows)
        assert len(want) == 460

        backend = task_backends["default"]
        assert wait_for(lambda: all(backend.get_result(i).status == TaskResultStatus.SUCCESSFUL for i in orphaned), timeout=20), (
            f"the new worker should recover the old one's tasks; new printed:\n{_printed(new)}")
        recovered_in = (redis_ms(r) - killed_at) / 1000
        assert wait_for(lambda: all(backend.get_result(i).status == TaskResultStatus.SUCCESSFUL for i in ids), timeout=20), (
            Counter(str(backend.get_result(i).status) for i in ids))
        new.proc.send_signal(signal.SIGTERM)
        new_log = new.output()
        assert new.proc.returncode == 0, new_log
        # a version that misread the other's data would say so: the flaky tasks' failures are warnings, nothing is an error
        for name, log in ((OLD, _printed(old)), (NEW, new_log)):
            assert not re.findall(r"^\S+ \S+ (?:ERROR|CRITICAL) .*", log, re.MULTILINE), (name, log)
    finally:
        for process in mine:
            if process.proc.poll() is None:
                process.proc.kill()
                process.proc.wait(10)

    # every task finished, read through the new backend, and in exactly one place
    results = {i: backend.get_result(i) for i in ids}
    for task_id, res in results.items():
        assert res.status == TaskResultStatus.SUCCESSFUL, (task_id, res.status, res.errors)
        assert where_is(r, task_id, res.task.queue_name) == ["finished"], task_id
    for kind, key, task_id in rows:
        assert _returned(kind, key, results[task_id].return_value), (kind, key, results[task_id].return_value)
    # nothing pending, scheduled, held or dead anywhere (pending may keep the wake markers of prioritized work)
    for q in QUEUES:
        k = keys(q)
        assert [i for i in r.lrange(k.pending, 0, -1) if not i.startswith("~")] == [], q
        assert (r.zcard(k.prioritized), r.zcard(k.scheduled), r.zcard(k.dead)) == (0, 0, 0), q
        assert [p for p in r.scan_iter(match=f"{k.prefix}processing:*") if r.llen(p)] == [], q

    # every effect exactly once, but what the kill explains: a task the old worker held may have run once more
    effects = Counter({key: int(n) for key, n in r.hgetall(EFFECTS).items()})
    assert set(effects) == set(want)
    orphan_keys = {key for _, key, task_id in rows if task_id in orphaned}
    orphan_keys |= {key + ":start" for key in orphan_keys}
    again = {key: effects[key] - n for key, n in want.items() if effects[key] != n}
    assert all(key in orphan_keys and extra == 1 for key, extra in again.items()), again

    # the mixing happened: each version's worker ran each version's tasks; what the old one held ended on the new one
    ran_on = {i: res.worker_ids[-1].split(".", 1)[0] for i, res in results.items()}
    assert set(ran_on.values()) == {OLD, NEW}
    matrix = Counter((produced_by[i], ran_on[i]) for i in produced_by)
    assert all(matrix[(side, name)] > 0 for side in ("old", "new") for name in (OLD, NEW)), matrix
    assert all(ran_on[i] == NEW and any(w.startswith(OLD + ".") for w in results[i].worker_ids) for i in orphaned)
    crossed = sum(1 for res in results.values() if {w.split(".", 1)[0] for w in res.worker_ids} == {OLD, NEW})
    print(f"\nrolling deploy: {len(ids)} tasks ({len(old_rows)} rows from the old producer, {len(new_rows)} from the new); "
          f"ran on old/new: {Counter(ran_on.values())[OLD]}/{Counter(ran_on.values())[NEW]}; by producer x worker: {dict(matrix)}; "
          f"{crossed} ran on both versions; SIGKILL with {len(orphaned)} held ({done_before} of {len(want)} effects done), "
          f"recovered in {recovered_in:.1f} s; {len(again)} effect(s) ran once more; {time.monotonic() - started:.1f} s in all")
