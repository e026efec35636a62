"""``task.using(depends_on=[r1, r2]).enqueue(...)``: runs once every task it names has succeeded."""

from __future__ import annotations

import pytest

from django_redisq.compat import InvalidTask, TaskResultStatus
from django_redisq.exceptions import InvalidArguments
from django_redisq.ops.workflows import workflow_of
from django_redisq.workflows.enqueue import get_workflow
from tests.helpers import ack, run_in_thread
from tests.testapp import workflow_tasks as wt


def names() -> list[str]:
    return [n for _, n, _ in wt.runs()]


def test_runs_after_both_parents(r, make_worker):
    r1, r2 = wt.add.enqueue(1, 1), wt.double.enqueue(4)
    r3 = wt.tag.using(depends_on=[r1, r2]).enqueue("after")
    assert r3.status == TaskResultStatus.READY
    assert r3.refresh() is None and r3.status == TaskResultStatus.READY  # not queued yet: read from its workflow
    run_in_thread(make_worker("default"))  # r1 only: r2 waits on 'emails'
    r3.refresh()
    assert r3.status == TaskResultStatus.READY and "tag" not in names()
    run_in_thread(make_worker("emails"))
    run_in_thread(make_worker("default"))
    r3.refresh()
    assert r3.status == TaskResultStatus.SUCCESSFUL and names()[-1] == "tag" and names().count("tag") == 1


def test_parents_already_finished_release_at_once(r, make_worker):
    r1 = wt.add.enqueue(1, 1)
    run_in_thread(make_worker("default"))
    r3 = wt.tag.using(depends_on=[r1.id]).enqueue("now")
    run_in_thread(make_worker("default"))
    assert r3.refresh() is None and r3.status == TaskResultStatus.SUCCESSFUL


def test_a_parent_that_fails_for_good_fails_the_dependent(r, make_worker):
    bad = wt.fails_unless.enqueue("p")
    r3 = wt.tag.using(depends_on=[bad]).enqueue("never")
    for _ in range(5):
        run_in_thread(make_worker("default"))
    r3.refresh()
    assert r3.status == TaskResultStatus.FAILED and "not run" in r3.errors[0].traceback and bad.id in r3.errors[0].traceback
    assert "tag" not in names()


def test_a_parent_running_when_adopted_is_recorded_by_the_repair_not_by_a_read(r, make_worker, broker):
    """The worker fetched the parent before the marker: a read of the dependent writes nothing; the repair (which the
    waiter's ``wait`` runs) records the parent, and the dependent runs."""
    r1 = wt.add.enqueue(2, 2)
    broker.heartbeat(["default"], "w1", {})
    held = broker.fetch("default", "w1", 1)  # running in a worker that has not seen the marker
    r3 = wt.tag.using(depends_on=[r1]).enqueue("late")
    ack(broker, "default", "w1", held[0].id, "4")  # settled without the workflow hook
    wf = get_workflow(workflow_of(r3.id))
    assert r3.refresh() is None and wf.refresh().header.done == 0  # a read records nothing
    assert wf.repair() == 1 and wf.refresh().header.done == 1
    run_in_thread(make_worker("default"))
    r3.refresh()
    assert r3.status == TaskResultStatus.SUCCESSFUL and names() == ["tag"]


def test_bad_depends_on_is_refused(r):
    with pytest.raises(InvalidTask):
        wt.tag.using(depends_on=[42])
    with pytest.raises(InvalidArguments):
        wt.tag.using(depends_on=["no-such-task"]).enqueue()
