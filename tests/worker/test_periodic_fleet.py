"""Three runworker processes on one-second schedules, one per catch-up policy, through a SIGKILL and a restart, a
SIGSTOP past WORKER_TIMEOUT, a redis-server restart and a window with no worker: every tick of the window is
enqueued exactly once, none missed while a worker was alive (bench/periodic.py at a small scale).

It also covers what a shorter run of three workers on one schedule checked here before (a kill, a restart, a
freeze), so that run (22 s of the suite) is gone."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


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
