"""runworker as a real process: exit codes, signals, errors."""

import signal
import time

import pytest

from tests.helpers import keys, wait_for, where_is
from tests.testapp import tasks
from tests.testapp.tasks import EFFECTS

pytestmark = [pytest.mark.slow, pytest.mark.corner]  # signals and exits of a real process: the oldest Python too


def test_burst_runs_everything_and_exits_zero(r, run_worker_process):
    results = tasks.add.enqueue_many([([i, i], {}) for i in range(20)])
    wp = run_worker_process("--burst", "-v", "1")
    out = wp.output()
    assert wp.proc.returncode == 0, out
    assert all(tasks.add.get_result(x.id).return_value == 2 * i for i, x in enumerate(results))
    # at INFO, successes are summed up (worker/observability/tasklog.py): the last window's line is written when the worker stops
    assert "outcome=success" not in out and "INFO settled 20 task(s) in " in out and ": 20 success; slowest tests.testapp.tasks.add id=" in out, out


def test_verbosity_2_logs_a_line_per_task(r, run_worker_process):
    tasks.add.enqueue_many([([i, i], {}) for i in range(5)])
    wp = run_worker_process("--burst", "-v", "2")
    out = wp.output()
    assert wp.proc.returncode == 0, out
    assert out.count("outcome=success") == 5 and "queue=default attempt=1 outcome=success duration=" in out


def test_unreachable_redis_is_one_clear_line(r, run_worker_process, redis_url):
    from tests.conftest import WorkerProcess

    wp = WorkerProcess("redis://:hunter2@127.0.0.1:1/0", "--burst")
    out = wp.output()
    assert wp.proc.returncode == 3  # Redis unreachable (management/cli/out.py)
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in out
    assert "Traceback" not in out and "hunter2" not in out


@pytest.mark.parametrize(("args", "message"), [
    (["--concurrency", "0"], "must be at least 1"),
    (["nope"], "not in TASKS"),
    (["--name", "a b"], "worker name"),
    (["--pool", "gevent"], "invalid choice: 'gevent'"),
    (["--pool", "processes", "--max-memory-per-child", "lots"], "expected a size such as 512M"),
    (["--pool", "processes", "--max-memory-per-child", "10K"], "must be at least 1M"),
    (["--pool", "processes", "--max-tasks-per-child", "0"], "must be at least 1"),
    (["--max-tasks-per-child", "10"], "apply to the process pool only (--pool processes)"),
    (["--pool", "asyncio", "--max-memory-per-child", "1G"], "apply to the process pool only"),
    (["--queue", "default"], "unrecognized arguments: --queue; queues are positional here: runworker default emails"),
    (["-Q", "default"], "queues are positional here"),
])
def test_bad_options(r, run_worker_process, args, message):
    wp = run_worker_process("--burst", *args)
    out = wp.output()
    assert wp.proc.returncode == 2 and message in out and "Traceback" not in out  # a wrong command line: one line, exit 2
    assert len([line for line in out.splitlines() if line.strip()]) == 1, out


def test_sigterm_finishes_the_running_task_then_exits_zero(r, run_worker_process):
    res = tasks.slow.delay("term", 1.0)
    wp = run_worker_process("-v", "1")
    assert wait_for(lambda: r.hget(EFFECTS, "term:start"))
    wp.proc.send_signal(signal.SIGTERM)
    out = wp.output()
    assert wp.proc.returncode == 0, out
    assert r.hget(EFFECTS, "term") == "1"
    assert tasks.slow.get_result(res.id).status == "SUCCESSFUL"
    assert r.zcard(keys().workers) == 0


def test_the_stop_line_names_what_it_waits_for_and_a_second_signal_hands_it_back_at_once(r, run_worker_process):
    """Ctrl-C says which tasks it waits for, until when, and that a second Ctrl-C exits now; that one hands them
    back to pending at once (their attempt counted), not to whichever worker reaps this one some day."""
    res = tasks.slow.delay("abort", 30.0)
    wp = run_worker_process("--name", "aborter")
    assert wait_for(lambda: r.hget(EFFECTS, "abort:start"))
    wp.proc.send_signal(signal.SIGINT)
    assert wait_for(lambda: "SIGINT: waiting up to" in wp.printed(), timeout=10), wp.printed()
    line = next(x for x in wp.printed().splitlines() if "SIGINT: waiting up to" in x)
    assert "30 s (SHUTDOWN_GRACE) for 1 running task(s) to finish: tests.testapp.tasks.slow id=" + res.id in line, line
    assert "Ctrl-C again exits now; unfinished tasks go back to pending" in line, line
    wp.proc.send_signal(signal.SIGINT)
    wp.proc.wait(10)
    assert wp.proc.returncode == 1
    assert "1 task(s) handed back to pending" in wp.output()
    assert where_is(r, res.id) == ["pending"]
    assert r.hget(keys().task(res.id), "deliveries") == "1"  # the attempt that was cut short is counted


def test_at_the_end_of_the_grace_the_running_tasks_go_back_to_pending_at_once(r, run_worker_process):
    res = tasks.slow.delay("graced", 30.0)
    wp = run_worker_process("--name", "graced", env={"REDISQ_OPT_SHUTDOWN_GRACE": "0.5"})
    assert wait_for(lambda: r.hget(EFFECTS, "graced:start"))
    wp.proc.send_signal(signal.SIGTERM)
    out = wp.output()
    assert "a second SIGTERM exits now" in out and "0.5 s (SHUTDOWN_GRACE)" in out, out
    assert f"handed back to pending, their attempt counted: tests.testapp.tasks.slow id={res.id}" in out, out
    assert where_is(r, res.id) == ["pending"]  # not held by a stopped worker until another one reaps it


def test_an_evicting_redis_is_warned_about(r, run_worker_process):
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        wp = run_worker_process("--burst")
        out = wp.output()
    finally:
        r.config_set("maxmemory-policy", "noeviction")
    assert wp.proc.returncode == 0
    assert "maxmemory-policy is 'allkeys-lru'" in out and "noeviction" in out
    assert "persistence is off" in out  # the test server runs without persistence


@pytest.mark.parametrize("pool", ["processes", "asyncio"])
def test_every_pool_drains_in_burst_mode(r, run_worker_process, pool):
    results = tasks.add.enqueue_many([([i, 1], {}) for i in range(20)])
    nap = tasks.async_nap.delay(0.05)
    extra = ["--max-memory-per-child", "1G"] if pool == "processes" else []
    wp = run_worker_process("--burst", "--pool", pool, "-c", "2", "-v", "2", *extra)
    out = wp.output()
    assert wp.proc.returncode == 0, out
    assert [tasks.add.get_result(x.id).return_value for x in results] == [i + 1 for i in range(20)]
    assert tasks.async_nap.get_result(nap.id).return_value == 0.05
    assert f"with 2 {'child process(es)' if pool == 'processes' else 'task(s) at once on an event loop'}" in out


def test_sigterm_with_the_process_pool_finishes_the_running_task_and_stops_the_children(r, run_worker_process):
    res = tasks.slow.delay("pterm", 1.0)
    wp = run_worker_process("--pool", "processes", "-v", "1")
    assert wait_for(lambda: r.hget(EFFECTS, "pterm:start"), 30)
    children = [int(p) for p in __import__("os").popen(f"pgrep -P {wp.proc.pid}").read().split()]
    wp.proc.send_signal(signal.SIGTERM)
    out = wp.output()
    assert wp.proc.returncode == 0, out
    assert tasks.slow.get_result(res.id).status == "SUCCESSFUL"
    assert children and not any(__import__("os").path.exists(f"/proc/{pid}") for pid in children)


def test_a_second_signal_with_the_process_pool_kills_the_children_at_once(r, run_worker_process):
    import os

    res = tasks.slow.delay("pabort", 30.0)
    wp = run_worker_process("--pool", "processes")
    assert wait_for(lambda: r.hget(EFFECTS, "pabort:start"), 30)
    children = [int(p) for p in os.popen(f"pgrep -P {wp.proc.pid}").read().split()]
    for pid in children:  # a terminal's Ctrl-C reaches the whole process group: children leave it to the worker
        os.kill(pid, signal.SIGINT)
        os.kill(pid, signal.SIGTERM)
    wp.proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert all(os.path.exists(f"/proc/{pid}") for pid in children)
    wp.proc.send_signal(signal.SIGINT)
    wp.proc.wait(10)
    assert wp.proc.returncode == 1
    assert wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in children), 5)
    assert where_is(r, res.id) == ["pending"]  # handed back at once


def test_runworker_runs_the_task_backends_checks_not_the_whole_projects(r, capsys):
    """A worker's start runs its task backends' checks (bad TASKS still stop it, as ``check`` would), not every
    app's: those belong to the deploy's ``check``/``migrate``/``runserver`` and cost each worker start their time."""
    import copy

    from django.conf import settings
    from django.core import checks
    from django.test import override_settings

    from django_redisq.management.commands.runworker import Command

    def broken(app_configs, **kwargs):
        return [checks.Error("an unrelated app is misconfigured", id="someapp.E001")]

    checks.register(broken)
    try:
        res = tasks.add.delay(2, 2)
        Command().run_from_argv(["manage.py", "runworker", "--burst"])  # as from the command line, checks included
        res.refresh()
        assert res.return_value == 4
        bad = copy.deepcopy(settings.TASKS)
        bad["default"]["OPTIONS"]["NOT_AN_OPTION"] = 1
        with override_settings(TASKS=bad), pytest.raises(SystemExit) as exited:
            Command().run_from_argv(["manage.py", "runworker", "--burst"])
        assert exited.value.code == 1
        err = capsys.readouterr().err
        assert "System check identified" in err and "django_redisq.E004" in err and "NOT_AN_OPTION" in err and "someapp" not in err
    finally:
        checks.registry.registry.registered_checks.discard(broken)


RELOAD_SETTINGS = """
SECRET_KEY = "x"
INSTALLED_APPS = ["django_redisq", "reloadapp"]
DATABASES = {{}}
USE_TZ = True
TASKS = {{"default": {{"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": ["default"],
                       "OPTIONS": {{"REDIS_URL": {url!r}, "KEY_PREFIX": "reload"}}}}}}
"""


@pytest.mark.slow
def test_reload_serves_a_task_added_after_the_worker_started(r, redis_url, tmp_path):
    """``runworker --reload``: a task written into tasks.py while the worker runs is served, not dead-lettered as
    unknown_task; the worker says why it starts again."""
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT, WorkerProcess

    app = tmp_path / "reloadapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "tasks.py").write_text("from django_redisq import task\n\n\n@task\ndef first() -> str:\n    return 'first'\n")
    (tmp_path / "reload_settings.py").write_text(RELOAD_SETTINGS.format(url=redis_url))
    env = {"DJANGO_SETTINGS_MODULE": "reload_settings", "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    wp = WorkerProcess(redis_url, "--reload", env=env, cwd=tmp_path)
    try:
        assert wait_for(lambda: r.zcard("reload:{default}:workers") == 1, timeout=30), wp.printed()
        with (app / "tasks.py").open("a") as f:
            f.write("\n\n@task\ndef added() -> str:\n    return 'added'\n")

        def noticed() -> bool:  # the reloader compares modification times once a second, from its first look on,
            if "tasks.py changed; reloading" in wp.printed():  # which a loaded machine may take after our write
                return True
            os.utime(app / "tasks.py")
            return False

        assert wait_for(noticed, timeout=30, step=1.0), wp.printed()
        enqueue = "import django; django.setup(); from reloadapp.tasks import added; print(added.enqueue().id)"
        done = subprocess.run([sys.executable, "-c", enqueue], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              env={**os.environ, **env})
        assert done.returncode == 0, done.stderr
        task_id = done.stdout.split()[-1]
        assert wait_for(lambda: r.hget(f"reload:{{default}}:t:{task_id}", "state") == "finished", timeout=30), wp.printed()
        assert "unknown_task" not in wp.printed()
    finally:
        wp.proc.send_signal(signal.SIGINT)
        wp.proc.wait(30)
