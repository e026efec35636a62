"""Three runworker processes on a one-second schedule, one SIGKILLed and restarted, one SIGSTOPped
past WORKER_TIMEOUT: every tick of the window is enqueued exactly once, none missed."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from tests.helpers import keys, redis_ms
from tests.testapp.tasks import TICKS

pytestmark = pytest.mark.slow

SCHEDULES = {"fleet": {"task": "tests.testapp.tasks.on_tick", "every": 1, "kwargs": {"key": "f"}, "timezone": "UTC"}}
ENV = {"REDISQ_SCHEDULES": json.dumps(SCHEDULES), "REDISQ_OPT_HEARTBEAT_INTERVAL": "0.5", "REDISQ_OPT_WORKER_TIMEOUT": "2"}


@pytest.mark.fault_run
def test_three_workers_fire_each_tick_once_through_kill_stop_and_restart(r, run_worker_process, make_worker):
    from django_redisq.worker.scheduler import Scheduler

    workers = [run_worker_process("-c", "2", env=ENV) for _ in range(3)]
    time.sleep(3)
    start = redis_ms(r)
    time.sleep(4)
    workers[0].proc.send_signal(signal.SIGKILL)
    time.sleep(3)
    workers.append(run_worker_process("-c", "2", env=ENV))
    time.sleep(2)
    os.kill(workers[1].proc.pid, signal.SIGSTOP)
    time.sleep(3.5)
    os.kill(workers[1].proc.pid, signal.SIGCONT)
    time.sleep(5)
    end = redis_ms(r)
    for w in workers[1:]:
        w.proc.send_signal(signal.SIGTERM)
    for w in workers[1:]:
        w.proc.wait(30)
    make_worker(scheduler=False).run()  # run what is still pending

    from django_redisq.schedules import Schedule

    base = Scheduler.id_base(Schedule(name="fleet", task="", queue="default", tz=None))  # type: ignore[arg-type]
    k = keys()
    enqueued = sorted(int(key.rsplit("-", 1)[1]) for key in r.scan_iter(match=f"{k.prefix}t:{base}*", count=1000))
    window = [t for t in enqueued if start <= t <= end]
    expected = list(range((start + 999) // 1000 * 1000, end // 1000 * 1000 + 1, 1000))
    assert window == expected, (len(window), len(expected))  # none missed while a worker was alive
    marker = r.hgetall(k.schedule("fleet"))
    assert int(marker["fired"]) == len(enqueued) and "missed" not in marker  # none enqueued twice
    runs = {_ms(f.split("|")[1]): int(n) for f, n in r.hgetall(TICKS).items()}
    ran = {t: runs.get(t, 0) for t in window}
    assert all(n >= 1 for n in ran.values()), ran
    # a task running when its worker was SIGKILLed may run again (at-least-once); nothing else does
    assert sum(n - 1 for n in ran.values()) <= 1, {t: n for t, n in ran.items() if n > 1}
    print(f"\nticks expected {len(expected)}, enqueued once {len(window)}, enqueued twice 0, missed 0, "
          f"ran twice {sum(1 for n in ran.values() if n > 1)}")


def _ms(text: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(text).timestamp() * 1000)


@pytest.mark.fault_run
def test_the_fleet_run_keeps_every_policy_under_kills_freezes_a_redis_restart_and_a_gap(tmp_path):
    """bench/periodic.py at a small scale (the long run is ``python bench/periodic.py``): three schedules, one
    per catch-up policy, through a SIGKILL, a freeze past WORKER_TIMEOUT, a redis-server restart and a
    window with no worker at all."""
    import importlib.util
    import sys

    from tests.conftest import ROOT

    spec = importlib.util.spec_from_file_location("redisq_bench_periodic", ROOT / "bench" / "periodic.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    report = module.run(30.0, tmp_path)
    table = module.table(report)
    print("\n" + table)
    assert module.checks(report) == [], table
    rows = report["schedules"]
    assert rows["all"]["gap ticks"] >= 3 and rows["all"]["gap ticks run"] == rows["all"]["gap ticks"]
    assert rows["skip"]["gap ticks run"] == 0 and rows["skip"]["missed (counted by the schedule)"] >= 3
