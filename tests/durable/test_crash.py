"""Durable steps under SIGKILL of real ``runworker`` processes, between and during steps.

Each step's effect counts its runs before it pauses, and returns the count; the step's record
holds the count of the run that was recorded. A recorded step that ran again would leave a count
above its record; a step killed mid-call (never recorded) may run again, and then its record is
the later run's count. So "no recorded step runs again" is: every record equals its final count.
"""

from __future__ import annotations

import signal
import time

import pytest

from django_redisq.compat import TaskResultStatus
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from tests.helpers import wait_for
from tests.testapp import tasks
from tests.testapp.tasks import EFFECTS

pytestmark = pytest.mark.slow
ENV = {"REDISQ_OPT_WORKER_TIMEOUT": "1", "REDISQ_OPT_HEARTBEAT_INTERVAL": "0.2"}


def test_sigkills_between_and_during_steps_never_rerun_a_recorded_step(r, run_worker_process):
    n, pause = 8, 0.3
    results = [tasks.three_steps.enqueue(f"c{i}", 1, pause) for i in range(n)]
    kills = 0

    def runs() -> int:
        return sum(int(v) for v in r.hvals(EFFECTS))

    for offset in (0.5, 1.5, 0.5, 1.5):  # x pause after a step began: during that step / between it and the next
        wp = run_worker_process("default", "--concurrency", "4", env=ENV)
        before = runs()
        assert wait_for(lambda before=before: runs() > before, timeout=30, step=0.005)
        time.sleep(pause * offset)
        wp.proc.send_signal(signal.SIGKILL)
        wp.proc.wait(10)
        kills += 1
    run_worker_process("default", "--concurrency", "4", env=ENV)

    def done() -> bool:
        for res in results:
            res.refresh()
        return all(res.status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED) for res in results)

    assert wait_for(done, timeout=60)
    assert [res.status for res in results] == [TaskResultStatus.SUCCESSFUL] * n
    broker = Broker(get_options("default"))
    reran = 0
    for i, res in enumerate(results):
        _, records = broker.durable.load("default", res.id)
        for name in ("one", "two", "three"):
            count = int(r.hget(EFFECTS, f"c{i}:{name}"))
            assert int(records[name].value_json) == count, (res.id, name, count, records[name])
            reran += count - (2 if name == "three" else 1)
        assert res.return_value == [int(records[x].value_json) for x in ("one", "two", "three")]
    assert reran > 0  # some kill landed inside a step (which then ran again, as it was never recorded)
    print(f"\n{kills} SIGKILLs over {n} tasks: every task SUCCESSFUL; {reran} step run(s) cut short and run again, "
          "no recorded step ran again")
