"""Chains, groups, chords and nesting, run by real in-process workers on a real Redis."""

from __future__ import annotations

import asyncio
import threading

from django_redisq import chain, chord, get_workflow, group
from django_redisq.compat import TaskResultStatus
from tests.helpers import run_in_thread
from tests.testapp import workflow_tasks as wt


def finish(make_worker, wf, rounds: int = 40):
    """Burst-run workers on every queue until the workflow ends."""
    for _ in range(rounds):
        run_in_thread(make_worker("default", "emails", "low"))
        if wf.refresh().status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED):
            return wf
    raise AssertionError(f"workflow did not end: {wf.status} {wf.states}")


def test_chain_passes_each_result_on(r, make_worker):
    wf = chain(wt.add.s(1, 2), wt.double.s(), wt.add.s(10)).enqueue()
    assert wf.refresh().status == TaskResultStatus.READY
    finish(make_worker, wf)
    assert wf.status == TaskResultStatus.SUCCESSFUL
    assert [x.return_value for x in wf.results] == [3, 6, 16]
    assert [name for _, name, _ in wt.runs()] == ["add", "double", "add"]


def test_chord_callback_gets_results_in_member_order(r, make_worker):
    wf = chord([wt.add.s(i, 0) for i in range(5)], wt.total.s(extra=100)).enqueue()
    finish(make_worker, wf)
    assert wf.status == TaskResultStatus.SUCCESSFUL
    assert wf.results[-1].args[0] == [0, 1, 2, 3, 4] and wf.return_value == 110
    assert [n for _, n, _ in wt.runs()].count("total") == 1
    assert get_workflow(wf.id).status == TaskResultStatus.SUCCESSFUL


def test_group_runs_members_and_si_ignores_results(r, make_worker):
    wf = chain(group(wt.add.s(i, 1) for i in range(3)), wt.tag.si("after")).enqueue()
    finish(make_worker, wf)
    assert wf.status == TaskResultStatus.SUCCESSFUL
    assert [x.return_value for x in wf.results] == [1, 2, 3, "tag"]
    assert wf.results[-1].args == ["after"]  # .si: nothing from the group


def test_nested_chain_of_group_then_chord_and_group_of_chains(r, make_worker):
    inner = chord([wt.add.s(1), wt.add.s(2)], wt.total.s())  # each member gets the first step's result
    wf = chain(wt.add.s(1, 1), inner, wt.double.s()).enqueue()
    finish(make_worker, wf)
    assert [x.return_value for x in wf.results] == [2, 3, 4, 7, 14]
    runs = wt.runs()
    order = [n for _, n, _ in runs]
    assert order.index("total") > max(i for i, n in enumerate(order) if n == "add") and order[-1] == "double"

    wt.runs_store().delete("wf:runs")
    wf2 = chain(group(chain(wt.add.s(1, 0), wt.double.s()), chain(wt.add.s(5, 0), wt.double.s())), wt.total.s()).enqueue()
    finish(make_worker, wf2)
    assert [x.return_value for x in wf2.results] == [1, 2, 5, 10, 12]


def test_steps_on_two_queues(r, make_worker):
    wf = chain(wt.add.s(2, 3), wt.double.s(), wt.double.s()).enqueue()
    assert [x.task.queue_name for x in wf.refresh().results] == ["default", "emails", "emails"]
    finish(make_worker, wf)
    assert wf.return_value == 20


def test_await_and_wait(r, make_worker):
    wf = chain(wt.add.s(1, 1), wt.add.s(1)).enqueue()
    worker = make_worker(burst=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert asyncio.run(wf.await_(timeout=10)).status == TaskResultStatus.SUCCESSFUL
    finally:
        worker.request_stop()
        thread.join(10)
    assert wf.wait(timeout=5).return_value == 3


def test_wait_times_out_while_steps_wait(r):
    wf = chain(wt.add.s(1, 1), wt.add.s(1)).enqueue()
    try:
        wf.wait(timeout=0.2)
    except TimeoutError as exc:
        assert wf.id in str(exc)
    else:
        raise AssertionError("no worker ran: wait must time out")
    assert wf.status == TaskResultStatus.READY and wf.states == ["pending", "waiting"]


def test_keys_expire_with_result_ttl_once_ended(r, make_worker):
    wf = chain(wt.add.s(1, 1), wt.add.s(1)).enqueue()
    from django_redisq.store.keys import WorkflowKeys

    k = WorkflowKeys(wf.id)
    assert r.ttl(k.meta) == -1 and r.ttl(k.spec) == -1  # running: kept
    finish(make_worker, wf)
    for key in k.all():
        assert r.ttl(key) in (-2,) or 0 < r.ttl(key) <= 86400, key
    assert r.ttl(k.meta) > 0 and r.ttl(k.done) > 0


def test_enqueue_returns_every_step_ready_with_its_fixed_id(r):
    wf = chord([wt.add.s(1, 2), wt.add.s(3)], wt.total.s()).enqueue()
    assert [x.id for x in wf.results] == [f"{wf.id}.{i}" for i in range(3)]
    assert [x.status for x in wf.results] == [TaskResultStatus.READY] * 3 and wf.states == ["pending", "pending", "waiting"]
    assert wf.results[0].args == [1, 2] and wf.results[2].task is wt.total
    assert [x.id for x in wf.refresh().results] == [f"{wf.id}.{i}" for i in range(3)]
