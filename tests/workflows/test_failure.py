"""A step that fails for good fails its workflow; on_error runs once; a replay of the step resumes it; cancel."""

from __future__ import annotations

import json
import time
from hashlib import sha1

import pytest

from django_redisq import chain, chord
from django_redisq.compat import TaskResultStatus
from django_redisq.ops.inspector import Inspector
from django_redisq.ops.operations import Operations
from django_redisq.settings.read import get_options
from django_redisq.store.keys import WorkflowKeys
from tests.conftest import topology_settings
from tests.helpers import keys, run_in_thread
from tests.testapp import workflow_tasks as wt
from tests.workflows.test_canvas import finish


def ops() -> Operations:
    return Operations(Inspector(get_options("default")))


def names() -> list[str]:
    return [n for _, n, _ in wt.runs()]


def failing_chord():
    return chord([wt.add.s(1, 1), wt.fails_unless.s("k", 5), wt.add.s(2, 2)], wt.total.s())


def test_failed_step_fails_the_workflow_and_dependents_say_why(r, make_worker):
    wf = chain(failing_chord(), wt.double.s()).enqueue(on_error=wt.on_failure.s("note"))
    finish(make_worker, wf)
    run_in_thread(make_worker())  # the on_error callback
    assert wf.refresh().status == TaskResultStatus.FAILED
    failed = wf.results[1]
    assert failed.status == TaskResultStatus.FAILED and wf.states[1] == "dead"
    assert "step 1" in wf.error and failed.id in wf.error and "broken k" in wf.error
    for blocked in wf.results[3:]:  # the callback and the step after it never ran, and say why
        assert blocked.status == TaskResultStatus.FAILED and "not run: step 1" in blocked.errors[0].traceback
    assert "total" not in names() and "double" not in names()
    assert [args for _, n, args in wt.runs() if n == "on_failure"] == [["note", wf.id, failed.id]]  # once
    # the failed workflow's keys stay as long as its dead letter may be replayed
    assert r.ttl(WorkflowKeys(wf.id).meta) > 0


def test_replay_from_the_dead_letters_resumes_the_workflow(r, make_worker):
    wf = chain(failing_chord(), wt.double.s()).enqueue(on_error=wt.on_failure.s("note"))
    finish(make_worker, wf)
    failed = wf.results[1]
    r.set("wf:fix:k", 1)
    assert ops().act("replay", "default", [failed.id]) == (1, 0)
    assert wf.refresh().status == TaskResultStatus.RUNNING  # read from the replayed step: no longer dead
    meta = WorkflowKeys(wf.id).meta
    assert r.hget(meta, "status") == "running" and r.ttl(meta) == -1  # the replay put it back: kept until it ends
    finish(make_worker, wf)
    assert wf.status == TaskResultStatus.SUCCESSFUL and wf.return_value == (2 + 5 + 4) * 2
    assert names().count("total") == 1 and names().count("on_failure") == 1
    assert r.ttl(WorkflowKeys(wf.id).meta) > 0 and r.hget(WorkflowKeys(wf.id).meta, "status") == "succeeded"


def test_edit_then_replay_resumes_with_the_new_arguments(r, make_worker):
    wf = chain(wt.fails_unless.s("e", 1), wt.double.s()).enqueue()
    finish(make_worker, wf)
    dead = wf.results[0]
    r.set("wf:fix:e", 1)
    msg = r.hget(keys().task(dead.id), "msg")
    edited = json.dumps({**json.loads(msg), "args": ["e", 21]})
    ops().edit_replay("default", dead.id, sha1(msg.encode()).hexdigest(), edited)
    assert r.hget(WorkflowKeys(wf.id).meta, "status") == "running"
    finish(make_worker, wf)
    assert wf.status == TaskResultStatus.SUCCESSFUL and wf.return_value == 42


def test_replay_into_another_queue_resumes_too(r, make_worker):
    wf = chain(wt.fails_unless.s("q", 3), wt.double.s()).enqueue()
    finish(make_worker, wf)
    r.set("wf:fix:q", 1)
    assert ops().act("replay", "default", [wf.results[0].id], to="low") == (1, 0)
    assert r.hget(WorkflowKeys(wf.id).meta, "status") == "running"
    finish(make_worker, wf)
    assert wf.status == TaskResultStatus.SUCCESSFUL and wf.return_value == 6 and wf.results[0].task.queue_name == "low"


def test_a_crash_between_the_replay_and_its_resume_is_repaired_by_the_step(r, make_worker, broker):
    """The replay landed, the resume did not (broker.replay alone): the workflow reads RUNNING, and the step's
    success un-fails it (wf_done.lua)."""
    wf = chain(wt.fails_unless.s("c2", 2), wt.double.s()).enqueue()
    finish(make_worker, wf)
    r.set("wf:fix:c2", 1)
    assert broker.operator.replay("default", [wf.results[0].id]) == 1
    assert r.hget(WorkflowKeys(wf.id).meta, "status") == "failed" and wf.refresh().status == TaskResultStatus.RUNNING
    finish(make_worker, wf)
    assert wf.status == TaskResultStatus.SUCCESSFUL and wf.return_value == 4


def test_cancel_never_runs_waiting_steps(r, make_worker):
    wf = chain(wt.add.s(1, 1), wt.double.s(), wt.double.s()).enqueue()
    assert wf.cancel() == "running"
    run_in_thread(make_worker("default", "emails"))
    assert wf.refresh().status == TaskResultStatus.FAILED and "cancelled by api" in wf.error
    assert names() == []
    assert wf.cancel() == "cancelled"


def test_cancel_after_the_first_step(r, make_worker):
    wf = chain(wt.add.s(1, 1), wt.slow.s(0), wt.double.s()).enqueue()
    run_in_thread(make_worker("default"))  # the first step, and the second queued into 'default'... then it runs too
    wf.cancel()
    run_in_thread(make_worker("default", "emails"))
    assert "double" not in names() and wf.refresh().status == TaskResultStatus.FAILED


def test_a_result_over_result_max_bytes_fails_the_step_clearly(r, make_worker):
    with topology_settings(RESULT_MAX_BYTES=100):
        wf = chain(wt.huge.s(), wt.tag.s()).enqueue()
        finish(make_worker, wf)
    assert wf.status == TaskResultStatus.FAILED and "RESULT_MAX_BYTES" in wf.error
    assert "tag" not in names()


def test_bad_parts_are_refused_at_enqueue(r):
    from django_redisq.exceptions import InvalidArguments
    from django_redisq.workflows.canvas import InvalidWorkflow

    with pytest.raises(InvalidWorkflow):
        chain(wt.add.s(1), "not a signature")
    with pytest.raises(InvalidArguments):
        chain(wt.add.s(1, 2, 3, 4)).enqueue()  # does not fit add(a, b=0)
    with pytest.raises(InvalidArguments):
        chain(wt.add.s(1), wt.add.s(object())).enqueue()
    assert r.keys("redisq:{wf:*") == []


def test_cancel_stops_a_running_step_and_nothing_after_it_runs(r, make_worker):
    import threading

    from tests.helpers import wait_for

    wf = chain(wt.slow.s(1.0, 7), wt.double.s()).enqueue()
    worker = make_worker("default", "emails", burst=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: wf.refresh().states[0] == "running", timeout=10)
        assert wf.cancel() == "running"
        assert wait_for(lambda: wf.refresh().states[0] == "dead", timeout=10)
        assert r.hget(keys().task(wf.results[0].id), "reason") == "cancelled"
        time.sleep(0.3)
        assert wf.refresh().states == ["dead", "waiting"] and wf.status == TaskResultStatus.FAILED
        assert names() == []
    finally:
        worker.request_stop()
        thread.join(15)


def test_cancelling_one_step_fails_its_workflow_and_runs_on_error_once(r, make_worker):
    from django_redisq import cancel

    wf = chain(wt.add.s(1, 1), wt.double.s()).enqueue(on_error=wt.on_failure.s("one"))
    assert cancel(wf.refresh().results[0].id) == "cancelled"
    assert r.hget(WorkflowKeys(wf.id).meta, "status") == "failed" and r.ttl(WorkflowKeys(wf.id).meta) > 0
    run_in_thread(make_worker("default", "emails"))
    assert wf.refresh().status == TaskResultStatus.FAILED and "cancelled by api" in wf.error
    assert names() == ["on_failure"]


def test_a_step_dead_lettered_where_no_hook_saw_it_reads_failed_and_is_failed_by_the_repair(r, make_worker, broker):
    """A read shows it FAILED and writes nothing; ``repair`` (run by ``wait``) fails the workflow for good."""
    wf = chain(wt.add.s(1, 1), wt.double.s()).enqueue()
    broker.operator.cancel("default", [wf.refresh().results[0].id], "elsewhere")  # the store's step alone: no workflow hook ran
    assert r.hget(WorkflowKeys(wf.id).meta, "status") == "running"
    assert wf.refresh().status == TaskResultStatus.FAILED and "dead-lettered" in wf.error
    assert r.hget(WorkflowKeys(wf.id).meta, "status") == "running"  # the read wrote nothing
    assert wf.wait(timeout=5).status == TaskResultStatus.FAILED and "dead-lettered" in wf.error
    assert r.hget(WorkflowKeys(wf.id).meta, "status") == "failed" and r.ttl(WorkflowKeys(wf.id).meta) > 0
