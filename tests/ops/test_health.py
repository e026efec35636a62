"""``manage.py redisq health``: exit codes for each threshold, settings per queue, Redis down; its checks."""

from __future__ import annotations

import copy
import io
import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_redisq.settings.read import validate
from django_redisq.testing import RedisServer, find_redis_server
from tests.conftest import ROOT
from tests.helpers import seed_dead, seed_pending


def health(*args: str) -> tuple[int, str]:
    """The exit code and stdout; a CommandError's one line (Redis unreachable: exit 3) comes after a tab."""
    out = io.StringIO()
    try:
        call_command("redisq", "health", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    except CommandError as exc:
        return exc.returncode, f"{out.getvalue()}\t{exc}"
    return 0, out.getvalue()


def with_options(**options: object) -> override_settings:
    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["OPTIONS"].update(options)
    return override_settings(TASKS=tasks)


@pytest.fixture
def backlog(r, broker):
    now_ms = int(r.time()[0]) * 1000
    seed_pending(r, "old", enqueued_at=now_ms - 120_000)
    for i in range(4):
        seed_pending(r, f"p{i}", enqueued_at=now_ms)
    seed_dead(r, "d1")
    seed_dead(r, "d2")
    broker.heartbeat(["default", "emails"], "w1", {})


def test_all_hold(backlog):
    code, out = health("--max-pending", "5", "--max-age", "600", "--max-dead", "2", "--min-workers", "1", "--queue", "default")
    assert (code, out.strip()) == (0, "ok: 1 queue(s) within their thresholds")


@pytest.mark.parametrize(("args", "line"), [
    (["--max-pending", "4"], "queue default (default): 5 task(s) pending, more than 4"),
    (["--max-age", "60"], "queue default (default): the oldest pending task has waited 12"),
    (["--max-dead", "1"], "queue default (default): 2 dead letter(s), more than 1"),
    (["--min-workers", "2"], "queue default (default): 1 live worker(s), fewer than 2"),
])
def test_each_threshold_breached_exits_1_with_one_line(backlog, args, line):
    code, out = health(*args, "--queue", "default")
    assert code == 1
    assert len(out.strip().splitlines()) == 1 and out.startswith(line), out


def test_every_breach_is_a_line_and_json_says_the_same(backlog):
    code, out = health("--max-pending", "0", "--min-workers", "1")
    assert code == 1
    assert sorted(out.strip().splitlines()) == [
        "queue default (default): 5 task(s) pending, more than 0",
        "queue low (default): 0 live worker(s), fewer than 1",
    ]
    code, out = health("--max-pending", "0", "--min-workers", "1", "--json")
    data = json.loads(out)
    assert code == 1 and data["status"] == "breached" and len(data["breaches"]) == 2
    assert data["queues"]["default"]["pending"] == 5 and data["queues"]["default"]["thresholds"] == {"max_pending": 0, "min_workers": 1}


def test_thresholds_from_settings_per_queue_and_overridden_on_the_command_line(backlog):
    with with_options(HEALTH={"*": {"MAX_DEAD": 5}, "default": {"MAX_AGE": 30}, "emails": {"MIN_WORKERS": 1}}):
        code, out = health()
        assert code == 1 and len(out.strip().splitlines()) == 1
        assert "queue default (default): the oldest pending task has waited" in out
        assert health("--max-age", "600")[0] == 0
        assert health("--queue", "emails")[0] == 0


def test_bad_thresholds_are_system_check_errors():
    def ids(health_setting: object) -> list[str]:
        return [p[0] for p in validate("default", {"QUEUES": ["default"], "OPTIONS": {"HEALTH": health_setting}})]

    assert ids({"*": {"MAX_AGE": 1.5}, "default": {"MAX_PENDING": 10, "MAX_DEAD": 0, "MIN_WORKERS": 2}}) == []
    assert ids([1]) == ["E030"]
    assert ids({"default": 5}) == ["E030"]
    assert ids({"nope": {}}) == ["E031"]
    assert ids({"default": {"MAX_BANANAS": 1}}) == ["E032"]
    assert ids({"default": {"MAX_PENDING": -1}}) == ["E032"]
    assert ids({"default": {"MAX_PENDING": 1.5}}) == ["E032"]
    assert ids({"default": {"MIN_WORKERS": True}}) == ["E032"]


def test_redis_down_exits_3(r):
    binary = find_redis_server(os.environ.get("REDISQ_TEST_REDIS") or None)
    if not binary:
        pytest.skip("no redis-server")
    server = RedisServer(binary).start()
    try:
        with with_options(REDIS_URL=server.url):
            from django_redisq import connection

            connection.reset()
            assert health("--max-pending", "10") == (0, "ok: 3 queue(s) within their thresholds\n")
            server.stop()
            code, out = health("--max-pending", "10")
            assert code == 3 and out.startswith("\tcannot reach Redis at redis://127.0.0.1:"), out
            code, out = health("--json")
            assert code == 3 and json.loads(out.split("\t")[0]) == {"status": "unreachable", "error": out.split("\t")[1],
                                                                     "exit_code": 3}
    finally:
        server.cleanup()
        from django_redisq import connection

        connection.reset()


@pytest.mark.slow
def test_real_exit_codes_of_the_command(r, redis_url, backlog):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.worker_settings", "REDISQ_TEST_REDIS_URL": redis_url,
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "django", "redisq", "health", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=60)

    assert run("--max-pending", "100").returncode == 0
    breached = run("--max-dead", "0", "--queue", "default")
    assert breached.returncode == 1 and breached.stdout.strip() == "queue default (default): 2 dead letter(s), more than 0"
    down = subprocess.run([sys.executable, "-m", "django", "redisq", "health"], cwd=ROOT, timeout=60, capture_output=True,
                          text=True, env={**env, "REDISQ_TEST_REDIS_URL": "redis://:hunter2@127.0.0.1:1/0"})
    assert down.returncode == 3 and "Traceback" not in down.stderr and "hunter2" not in down.stdout + down.stderr
