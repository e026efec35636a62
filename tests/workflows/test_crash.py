"""SIGKILL of a runworker process in the middle of workflows: no step lost, no callback queued twice."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from django_redisq import chain, chord, group
from django_redisq.compat import TaskResultStatus
from tests.helpers import keys, wait_for
from tests.testapp import workflow_tasks as wt


def first_runs(runs: list[tuple[str, str, list]]) -> dict[str, int]:
    """Task id -> position of its first recorded run."""
    out: dict[str, int] = {}
    for n, (tid, _, _) in enumerate(runs):
        out.setdefault(tid, n)
    return out


def test_sigkill_mid_workflow_loses_no_step_and_fires_no_callback_twice(r, run_worker_process):
    flows = [
        chord([wt.slow.s(0.15, i) for i in range(8)], wt.total.s()).enqueue(),
        chain(wt.slow.s(0.2, 1), wt.slow.si(0.2, 2), wt.double.s(), wt.add.s(1)).enqueue(),
        chain(group(chain(wt.slow.s(0.1, i), wt.double.s()) for i in range(4)), wt.total.s(5)).enqueue(),
    ]
    a = run_worker_process("default", "emails", "-c", "4", "--name", "a")
    b = run_worker_process("default", "emails", "-c", "1", "--name", "b")
    assert wait_for(lambda: len(wt.runs()) >= 3, timeout=30)  # mid-way: some steps done, others running
    assert wait_for(lambda: sum(r.llen(k) for k in r.keys("redisq:{*}:processing:a.*")) > 0, timeout=10)
    a.proc.send_signal(signal.SIGKILL)  # while it holds steps
    assert len(wt.runs()) < 22
    c = run_worker_process("default", "emails", "-c", "2", "--name", "c")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(f.refresh().status == TaskResultStatus.SUCCESSFUL for f in flows):
        time.sleep(0.1)
    assert [f.status for f in flows] == [TaskResultStatus.SUCCESSFUL] * 3, [f.states for f in flows]
    assert [f.return_value for f in flows] == [sum(range(8)), 5, sum(2 * i for i in range(4)) + 5]
    runs = wt.runs()
    first = first_runs(runs)
    for f in flows:
        for i, step in enumerate(f.state.steps):  # every step ran, each after every one of its parents
            tid = f.results[i].id
            assert tid in first, f"step {tid} never ran"
            for p in step["p"]:
                assert first[f.results[p].id] < first[tid], f"{tid} ran before its parent {f.results[p].id}"
        callback = f.results[-1]
        again = int(r.hget(keys(callback.task.queue_name).task(callback.id), "deliveries")) > 1  # re-run after the kill
        assert sum(1 for tid, _, _ in runs if tid == callback.id) == 1 or again
    for wp in (b, c):
        wp.proc.send_signal(signal.SIGTERM)
    for wp in (b, c):  # a warm stop: their running steps take at most 0.2 s
        try:
            wp.proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"a worker did not stop within 30 s of SIGTERM; its log ends:\n{wp.printed()[-4000:]}")


def test_three_sigkills_across_mixed_workflows(r, run_worker_process):
    """A small chaos run: chords, chains and a group of chains while workers are killed in turn.
    Reports 0 lost steps, 0 steps run before a parent, no callback run more often than it was delivered."""
    flows = [chord([wt.slow.s(0.05, i) for i in range(6)], wt.total.s()).enqueue() for _ in range(3)]
    flows += [chain(*([wt.slow.s(0.05, 1)] + [wt.slow.s(0.05)] * 4)).enqueue() for _ in range(2)]
    flows.append(chain(group(chain(wt.slow.s(0.05, i), wt.double.s()) for i in range(3)), wt.total.s()).enqueue())
    total_steps = sum(len(f.refresh().results) for f in flows)
    workers = [run_worker_process("default", "emails", "-c", "3", "--name", f"w{i}") for i in range(2)]
    for kill in range(3):
        done_before = len(wt.runs())
        wait_for(lambda n=done_before: len(wt.runs()) >= n + 4, timeout=20)
        victim = workers.pop(0)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        workers.append(run_worker_process("default", "emails", "-c", "3", "--name", f"k{kill}"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(f.refresh().status == TaskResultStatus.SUCCESSFUL for f in flows):
        time.sleep(0.1)
    assert [f.status for f in flows] == [TaskResultStatus.SUCCESSFUL] * len(flows), [f.states for f in flows]
    runs = wt.runs()
    first = first_runs(runs)
    assert set(first) == {x.id for f in flows for x in f.results} and len(first) == total_steps  # none lost, none extra
    for f in flows:
        for i, step in enumerate(f.state.steps):
            assert all(first[f.results[p].id] < first[f.results[i].id] for p in step["p"])
        last = f.results[-1]
        delivered = int(r.hget(keys(last.task.queue_name).task(last.id), "deliveries"))
        assert sum(1 for tid, _, _ in runs if tid == last.id) <= delivered
    for wp in workers:
        wp.proc.send_signal(signal.SIGTERM)
        wp.proc.wait(30)


def test_a_chord_on_the_process_pool(r, run_worker_process):
    wf = chain(chord([wt.add.s(i, 1) for i in range(4)], wt.total.s()), wt.double.s()).enqueue()
    wp = run_worker_process("default", "emails", "--pool", "processes", "-c", "2")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and wf.refresh().status != TaskResultStatus.SUCCESSFUL:
        time.sleep(0.1)
    assert wf.status == TaskResultStatus.SUCCESSFUL and wf.return_value == 2 * (1 + 2 + 3 + 4)
    wp.proc.send_signal(signal.SIGTERM)
    wp.proc.wait(30)
