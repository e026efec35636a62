"""``manage.py demo`` (example_project) tells its story: no raw tracebacks, no task log lines mixed in."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_the_demo_tells_its_story_without_log_noise(r, redis_url, tmp_path):
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "example_project")])}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "manage.py", "demo"], cwd=ROOT / "example_project", env=env,
                          capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "Traceback" not in out and "Task id=" not in out and " outcome=" not in out, out
    assert "retry: sync_stock attempt 1 failed (ConnectionError: supplier API timed out (attempt 1))" in out
    assert "dead letter: notify_warehouse after attempt 2 (failed: RuntimeError" in out
    assert out.index("retry: sync_stock attempt 2") < out.index("What happened:")
