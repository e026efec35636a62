"""The pytest plugin: installed with the package, its fixtures only once a suite asks (``--redisq``).

A suite of its own runs in a subprocess, as a project's would: its tests enqueue
through the real backend on the plugin's throwaway redis-server and drain the
queue with in-process workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

SUITE = '''
from tests.testapp.tasks import add, always_fails, flaky


def test_drain_runs_what_was_enqueued(redisq_queue, redisq_url):
    assert redisq_url.startswith("redis://127.0.0.1:")
    result = add.delay(1, 2)
    redisq_queue.drain()
    assert add.get_result(result.id).return_value == 3


def test_the_queues_start_empty(redisq_queue):
    from django_redisq.ops.inspector import Inspector

    assert all(s.pending == 0 and s.dead == 0 for s in Inspector.for_alias().stats())


def test_captured_runs_through_the_worker(redisq_captured):
    flaky.delay("plugin", 1)
    always_fails.delay("x")
    redisq_captured.assert_enqueued(flaky, args=("plugin", 1))
    ok, bad = redisq_captured.run()
    assert ok.return_value == "ok after 2" and ok.attempts == 2
    assert bad.status == "FAILED"
'''


def run_suite(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_with_plugin.py").write_text(SUITE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ds", "tests.settings",
                           "--rootdir", str(tmp_path), *options, "test_with_plugin.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)


@pytest.mark.slow
def test_with_redisq_the_fixtures_give_a_server_and_a_queue_to_drain(tmp_path: Path) -> None:
    done = run_suite(tmp_path, "--redisq")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_without_asking_the_plugin_adds_no_fixture(tmp_path: Path) -> None:
    done = run_suite(tmp_path, "-k", "drain")
    assert done.returncode != 0
    assert "fixture 'redisq_queue' not found" in done.stdout, done.stdout + done.stderr


def test_the_ini_option_turns_it_on_too(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nredisq_fixtures = true\n")
    done = run_suite(tmp_path, "-k", "start_empty")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
