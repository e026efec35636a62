"""The settler's workflow hooks (worker/flows.py) at the instants the end-to-end tests cannot aim at."""

from __future__ import annotations

from django_redisq import chain
from django_redisq.store.workflows import WorkflowStore
from django_redisq.worker.flows import WorkflowHooks
from django_redisq.worker.outcome import Missed
from django_redisq.workflows.engine import WorkflowEngine
from tests.helpers import keys, where_is
from tests.testapp import workflow_tasks as wt


def retrying(step, what):  # type: ignore[no-untyped-def]
    return step()


def test_a_cancel_between_the_record_and_the_release_still_stops_the_released_step(r, broker, monkeypatch):
    wf = chain(wt.add.s(1, 1), wt.add.s(1)).enqueue()
    engine = WorkflowEngine(WorkflowStore(broker))
    hooks = WorkflowHooks(engine)
    real = engine.release

    def release_after_a_cancel(workflow_id, released, *rest):  # type: ignore[no-untyped-def]
        wf.cancel()  # reads the steps before the next one is queued: it cannot cancel it
        return real(workflow_id, released, *rest)

    monkeypatch.setattr(engine, "release", release_after_a_cancel)
    assert hooks._done(wf.id, 0, "2", retrying)
    child = f"{wf.id}.1"
    assert where_is(r, child) == ["dead"] and r.hget(keys().task(child), "reason") == "cancelled"


def test_a_release_that_cannot_land_holds_the_ack(r, broker, monkeypatch):
    wf = chain(wt.add.s(1, 1), wt.add.s(1)).enqueue()
    engine = WorkflowEngine(WorkflowStore(broker))
    hooks = WorkflowHooks(engine)
    monkeypatch.setattr(engine, "release", lambda *a: None)
    assert hooks._done(wf.id, 0, "2", lambda step, what: step() if "recording" in what else Missed.STOPPED) is False
    monkeypatch.undo()
    assert hooks._done(wf.id, 0, "2", retrying) is True  # the redelivered step releases it after all
    assert where_is(r, f"{wf.id}.1") == ["pending"]
