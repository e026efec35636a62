"""The settler's workflow hooks (worker/settling/flows.py) at the instants the end-to-end tests cannot aim at."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django_redisq import chain
from django_redisq.store.workflows import WorkflowStore
from django_redisq.worker.settling.flows import WorkflowHooks
from django_redisq.worker.settling.steps import Landing, SettleSteps, StepResult
from django_redisq.workflows.engine import WorkflowEngine
from tests.helpers import keys, where_is
from tests.testapp import workflow_tasks as wt

STEPS = SettleSteps(force=threading.Event())


class StoppedUnlessRecording:
    """A step runner under a force stop while Redis is away: only the recording lands."""

    def run(self, step: Callable[[], Any], what: str) -> StepResult[Any]:
        return STEPS.run(step, what) if "recording" in what else StepResult(Landing.STOPPED)


def test_a_cancel_between_the_record_and_the_release_still_stops_the_released_step(r, broker, monkeypatch):
    wf = chain(wt.add.s(1, 1), wt.add.s(1)).enqueue()
    engine = WorkflowEngine(WorkflowStore(broker))
    hooks = WorkflowHooks(engine=engine, steps=STEPS)
    real = engine.release

    def release_after_a_cancel(workflow_id, released, *rest):  # type: ignore[no-untyped-def]
        wf.cancel()  # reads the steps before the next one is queued: it cannot cancel it
        return real(workflow_id, released, *rest)

    monkeypatch.setattr(engine, "release", release_after_a_cancel)
    assert hooks.record_step(wf.id, 0, "2").landed
    child = f"{wf.id}.1"
    assert where_is(r, child) == ["dead"] and r.hget(keys().task(child), "reason") == "cancelled"


def test_a_release_that_cannot_land_holds_the_ack(r, broker):
    wf = chain(wt.add.s(1, 1), wt.add.s(1)).enqueue()
    engine = WorkflowEngine(WorkflowStore(broker))
    held = WorkflowHooks(engine=engine, steps=StoppedUnlessRecording()).record_step(wf.id, 0, "2")
    assert held.landing is Landing.STOPPED
    assert where_is(r, f"{wf.id}.1") == []
    assert WorkflowHooks(engine=engine, steps=STEPS).record_step(wf.id, 0, "2").landed  # the redelivered step releases it
    assert where_is(r, f"{wf.id}.1") == ["pending"]
