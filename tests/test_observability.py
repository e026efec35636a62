"""Per-worker metrics scraped from a running runworker, the health file, and task_recovered after a real SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
import urllib.request

import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from django_redisq import signals
from tests.helpers import keys, wait_for
from tests.testapp import tasks
from tests.testapp.tasks import EFFECTS

pytestmark = pytest.mark.slow


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def at(name: str, **labels: str) -> tuple[str, tuple]:
    return name, tuple(sorted(labels.items()))


def log_text(wp) -> str:
    wp.log.seek(0)
    return wp.log.read()


def test_the_worker_endpoint_is_scraped_during_a_run(r, run_worker_process):
    wp = run_worker_process("-c", "2", "--metrics-port", "0", "-v", "1")
    assert wait_for(lambda: "metrics of worker" in log_text(wp), timeout=20), log_text(wp)
    host, port = re.search(r"at http://([\d.]+):(\d+)/metrics", log_text(wp)).groups()
    assert host == "127.0.0.1"  # loopback by default
    url = f"http://{host}:{port}/metrics"
    for i in range(5):
        tasks.add.enqueue(i, i)
    tasks.not_retryable.enqueue()
    tasks.slow.enqueue("busy", 1.5)
    assert wait_for(lambda: r.hget(EFFECTS, "busy:start"), timeout=20)
    during = samples(urllib.request.urlopen(url, timeout=5).read().decode())
    assert during[("redisq_worker_executors_busy", ())] >= 1
    assert during[("redisq_worker_executors", ())] == 2
    assert wait_for(lambda: r.hget(EFFECTS, "busy") == "1", timeout=20)
    add = {"queue": "default", "task": "tests.testapp.tasks.add"}
    slow = {"queue": "default", "task": "tests.testapp.tasks.slow"}
    scraped: list[dict] = []

    def settled() -> bool:  # the metrics count a task once it is settled, a moment after its effect
        scraped[:] = [samples(urllib.request.urlopen(url, timeout=5).read().decode())]
        return scraped[0].get(at("redisq_worker_queue_wait_seconds_count", queue="default")) == 7 and \
            scraped[0].get(at("redisq_worker_task_duration_seconds_bucket", le="+Inf", **slow)) == 1

    assert wait_for(settled, timeout=10, step=0.05), scraped
    s = scraped[0]
    assert s[at("redisq_worker_tasks_total", outcome="success", **add)] == 5
    assert s[at("redisq_worker_tasks_total", outcome="dead_lettered", queue="default", task="tests.testapp.tasks.not_retryable")] == 1
    assert s[at("redisq_worker_task_duration_seconds_count", **add)] == 5
    assert s[at("redisq_worker_task_duration_seconds_bucket", le="+Inf", **slow)] == 1
    assert s[at("redisq_worker_task_duration_seconds_bucket", le="1.0", **slow)] == 0
    assert s[at("redisq_worker_task_duration_seconds_sum", **slow)] >= 1.5
    assert s[at("redisq_worker_queue_wait_seconds_count", queue="default")] == 7
    assert s[("redisq_worker_lease_losses_total", ())] == 0 and s[("redisq_worker_redis_reconnects_total", ())] == 0
    assert s[("redisq_worker_heartbeat_age_seconds", ())] < 5
    assert s[at("process_resident_memory_bytes")] > 10_000_000
    info = [k for k in s if k[0] == "redisq_worker_info"]
    assert info and dict(info[0][1])["pool"] == "threads"
    wp.proc.send_signal(signal.SIGTERM)
    assert wp.output() and wp.proc.returncode == 0


def test_a_worker_says_it_needs_the_extra_or_a_free_port(r, run_worker_process):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        wp = run_worker_process("--burst", "--metrics-port", str(busy.getsockname()[1]))
        out = wp.output()
    assert wp.proc.returncode != 0 and "--metrics-port" in out and "Traceback" not in out


def test_the_health_file_ages_while_redis_is_paused(r, tmp_path, redis_server, run_worker_process):
    if isinstance(redis_server, str):
        pytest.skip("needs a redis-server this suite started")
    path = tmp_path / "alive"
    env = {"REDISQ_OPT_WORKER_TIMEOUT": "1.5", "REDISQ_OPT_HEARTBEAT_INTERVAL": "0.3"}
    wp = run_worker_process("--health-file", str(path), "--metrics-port", "0", "-v", "1", env=env)
    assert wait_for(path.exists, timeout=20), log_text(wp)
    assert wait_for(lambda: time.time() - path.stat().st_mtime < 0.5, timeout=5)
    assert path.read_text().startswith("ok ")
    os.kill(redis_server.proc.pid, signal.SIGSTOP)
    try:
        stopped = time.time()
        assert wait_for(lambda: path.read_text().startswith("stale "), timeout=10), log_text(wp)
        age = time.time() - path.stat().st_mtime
        assert age >= 1.5 and time.time() - stopped >= 1.0  # the file's time stayed at the last good heartbeat
        assert "has had no Redis round trip" in log_text(wp)
    finally:
        os.kill(redis_server.proc.pid, signal.SIGCONT)
    assert wait_for(lambda: path.read_text().startswith("ok ") and time.time() - path.stat().st_mtime < 1, timeout=15)
    assert "reaches Redis again" in log_text(wp)
    port = re.search(r"at http://[\d.]+:(\d+)/metrics", log_text(wp)).group(1)
    s = samples(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
    assert s[at("redisq_worker_redis_reconnects_total")] >= 1 and s[at("redisq_worker_heartbeat_age_seconds")] < 1.5
    wp.proc.send_signal(signal.SIGTERM)
    wp.output()


def test_a_health_file_that_cannot_be_replaced_leaves_no_temporary_file_behind(r, tmp_path, run_worker_process):
    """The path is a directory, so every beat's rename fails: each beat's temporary file is removed again."""
    path = tmp_path / "alive"
    path.mkdir()
    env = {"REDISQ_OPT_WORKER_TIMEOUT": "1.5", "REDISQ_OPT_HEARTBEAT_INTERVAL": "0.2"}
    wp = run_worker_process("--health-file", str(path), "-v", "1", env=env)
    assert wait_for(lambda: log_text(wp).count("cannot write the health file") >= 8, timeout=20), log_text(wp)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alive"] and not list(path.iterdir())
    wp.proc.send_signal(signal.SIGTERM)
    wp.output()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alive"]


@pytest.mark.parametrize("attack", ["owned_by_another_user", "world_writable_directory"])
def test_runworker_refuses_a_health_file_another_user_controls(r, tmp_path, run_worker_process, attack):
    """A path another local user created first (here uid 65534), or one in a directory any user may write to
    without the sticky bit: one line, exit status 1, the file untouched and the worker never registered."""
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / "alive"
    if attack == "owned_by_another_user":
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        path.write_text("ok forged\n")
        os.chown(path, 65534, 65534)
        os.utime(path, (1_000_000_000, 1_000_000_000))
    else:
        folder.chmod(0o777)
    wp = run_worker_process("--health-file", str(path), "--burst", "-v", "1")  # --burst: a worker that starts ends
    out = wp.output()
    assert wp.proc.returncode == 1 and "Traceback" not in out, out
    refused = [line for line in out.splitlines() if "--health-file" in line]
    assert len(refused) == 1 and refused[0].startswith("CommandError: --health-file: "), out
    assert "uid 65534" in refused[0] if attack == "owned_by_another_user" else "no sticky bit" in refused[0]
    if attack == "owned_by_another_user":
        st = path.stat()
        assert path.read_text() == "ok forged\n" and st.st_uid == 65534 and st.st_mtime == 1_000_000_000
        assert [p.name for p in folder.iterdir()] == ["alive"]
    else:
        assert not list(folder.iterdir())
    assert not r.zrange(keys().workers, 0, -1)


def test_task_recovered_fires_once_per_task_after_a_real_sigkill(r, run_worker_process, make_worker):
    """A runworker holding two running tasks is SIGKILLed; an in-process worker's reaper hands them back
    and sends task_recovered once for each; running them afterwards sends no more."""
    opts = {"WORKER_TIMEOUT": 1.5, "HEARTBEAT_INTERVAL": 0.3}
    env = {f"REDISQ_OPT_{k}": str(v) for k, v in opts.items()}
    held = [tasks.slow_first_time.enqueue(f"k{i}", 60) for i in range(2)]
    victim = run_worker_process("-c", "2", env=env)
    assert wait_for(lambda: r.hget(EFFECTS, "k0:start") and r.hget(EFFECTS, "k1:start"), timeout=20)
    assert wait_for(lambda: sum(r.llen(k) for k in r.scan_iter(keys().prefix + "processing:*")) == 2, timeout=20)
    dead_id = next(iter(r.zrange(keys().workers, 0, -1)))
    victim.proc.kill()
    victim.proc.wait(10)
    got: list[dict] = []
    signals.task_recovered.connect(receiver := lambda **kw: got.append(kw), weak=False)
    from django.conf import settings

    tasks_setting = {**settings.TASKS, "default": {**settings.TASKS["default"],
                                                   "OPTIONS": {**settings.TASKS["default"]["OPTIONS"], **opts}}}
    try:
        with override_settings(TASKS=tasks_setting):
            w = make_worker(burst=False, concurrency=2)
            t = threading.Thread(target=w.run, daemon=True)
            t.start()
            try:
                assert wait_for(lambda: len(got) >= 2, timeout=20)
                assert wait_for(lambda: all(tasks.slow_first_time.get_result(x.id).is_finished for x in held), timeout=20)
                time.sleep(1.0)  # a later reap round must not tell of them again
            finally:
                w.request_stop()
                t.join(15)
    finally:
        signals.task_recovered.disconnect(receiver)
    assert sorted(k["task_id"] for k in got) == sorted(x.id for x in held)
    assert {(k["dead_worker"], k["queue"], k["task_name"], k["deliveries"], k["worker"]) for k in got} == {
        (dead_id, "default", "tests.testapp.tasks.slow_first_time", 1, w.id)}
    assert int(r.get(keys().counter("recovered"))) == 2


def test_a_failing_receiver_does_not_disturb_the_worker(r, make_worker):
    def broken(**kw):
        raise RuntimeError("receiver bug")

    signals.task_dead_lettered.connect(broken, weak=False)
    try:
        res = tasks.not_retryable.enqueue()
        ok = tasks.add.enqueue(1, 1)
        make_worker().run()
    finally:
        signals.task_dead_lettered.disconnect(broken)
    assert tasks.add.get_result(ok.id).return_value == 2
    assert r.zscore(keys().dead, res.id) is not None


def test_banner_names_queues_pool_and_redis_without_credentials(r, run_worker_process):
    wp = run_worker_process("--burst", "-v", "2", "emails", "default")
    out = wp.output()
    assert wp.proc.returncode == 0, out
    line = next(x for x in out.splitlines() if "django_redisq worker" in x)
    assert "serving emails, default of backend 'default' with 1 thread(s) (threads pool) on redis://127.0.0.1:" in line
    assert "reaped after" in line and "@" not in line


def test_each_failed_attempt_logs_its_traceback_once_at_warning(r, run_worker_process):
    tasks.always_fails.enqueue("kaboom")  # max_retries=1: two attempts
    tasks.not_retryable.enqueue()
    tasks.add.enqueue(1, 2)
    wp = run_worker_process("--burst", "-v", "1", env={"REDISQ_OPT_BACKOFF_BASE": "0", "REDISQ_OPT_BACKOFF_MAX": "0"})
    out = wp.output()
    assert wp.proc.returncode == 0, out
    assert out.count("Traceback (most recent call last)") == 3, out
    warnings = [line for line in out.splitlines() if " WARNING task " in line]
    assert len(warnings) == 3 and sum("outcome=retry" in w for w in warnings) == 1, out
    assert out.count("ValueError: kaboom") == 2 and out.count("KeyError: 'missing'") == 1
    assert " INFO settled 4 task(s) in " in out and ": 2 dead, 1 retry, 1 success;" in out, out  # the summary line
    assert " INFO task tests.testapp.tasks.add " not in out and "Task id=" not in out  # Django's own lines are not repeated


def test_a_lost_lease_is_counted_and_signals_nothing(r, make_worker):
    """The task is taken from the worker's processing list while it runs (as a reaper would): its ack finds
    the lease lost, which the worker's endpoint counts; no signal tells of a step that did not happen."""
    got: list[dict] = []
    signals.task_dead_lettered.connect(receiver := lambda **kw: got.append(kw), weak=False)
    w = make_worker(burst=False)
    port = w.observer.serve_metrics("127.0.0.1", 0)
    t = threading.Thread(target=w.run, daemon=True)
    try:
        t.start()
        res = tasks.slow.enqueue("lease", 0.5)
        assert wait_for(lambda: r.hget(EFFECTS, "lease:start"), timeout=10)
        assert r.lrem(keys().processing(w.id), 1, res.id) == 1
        assert wait_for(lambda: r.hget(EFFECTS, "lease") == "1", timeout=10)
        url = f"http://127.0.0.1:{port}/metrics"
        assert wait_for(lambda: samples(urllib.request.urlopen(url, timeout=5).read().decode())[at("redisq_worker_lease_losses_total")] == 1,
                        timeout=10)
    finally:
        signals.task_dead_lettered.disconnect(receiver)
        w.request_stop()
        t.join(15)
        w.observer.stop()
    assert got == []
