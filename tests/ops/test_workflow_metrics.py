"""Workflow metrics on the fleet scrape: running now, and enqueued / succeeded / failed / cancelled totals."""

from __future__ import annotations

from django_redisq import chain
from tests.ops.test_metrics import scrape
from tests.testapp import workflow_tasks as wt
from tests.workflows.test_canvas import finish


def flows(samples: dict) -> dict[str, float]:
    return {name: samples[(name, (("backend", "default"),))] for name in (
        "redisq_workflows_running", "redisq_workflows_enqueued_total", "redisq_workflows_succeeded_total",
        "redisq_workflows_failed_total", "redisq_workflows_cancelled_total")}


def test_running_succeeded_failed_cancelled_and_resumed(r, make_worker):
    from django_redisq.ops.inspector import Inspector
    from django_redisq.ops.operations import Operations
    from django_redisq.settings.read import get_options

    ok = chain(wt.add.s(1, 1), wt.add.s(1)).enqueue()
    bad = chain(wt.fails_unless.s("m"), wt.add.s(1)).enqueue()
    gone = chain(wt.add.s(1, 1), wt.add.s(1)).enqueue()
    gone.cancel()
    assert flows(scrape()) == {"redisq_workflows_running": 2, "redisq_workflows_enqueued_total": 3,
                               "redisq_workflows_succeeded_total": 0, "redisq_workflows_failed_total": 0,
                               "redisq_workflows_cancelled_total": 1}
    finish(make_worker, ok)
    finish(make_worker, bad)
    got = flows(scrape())
    assert (got["redisq_workflows_running"], got["redisq_workflows_succeeded_total"], got["redisq_workflows_failed_total"]) == (0, 1, 1)
    r.set("wf:fix:m", 1)
    Operations(Inspector(get_options("default"))).act("replay", "default", [bad.refresh().results[0].id])
    finish(make_worker, bad)
    got = flows(scrape())
    assert (got["redisq_workflows_running"], got["redisq_workflows_succeeded_total"]) == (0, 2)
    assert ok.refresh().return_value == 3 and bad.refresh().return_value == 1
