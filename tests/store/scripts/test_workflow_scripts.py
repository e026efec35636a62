"""The workflow scripts (wf_*.lua) on one Redis and on the cluster, and a Hypothesis state machine of completion.

The machine drives one random workflow (chains, groups, chords, nested) the way
workers would, without running tasks: a step "runs" by ``wf_done.lua`` (what the
settler does before the ack), then the release of what it answered (idempotent
enqueue by id), then the ack; a crash may cut that sequence after the record or
after the release, and the step is then delivered again; an acked step may be
recorded again too (a late duplicate). After every step it checks that

* every released step is queued once (its id once in its queue's pending list),
  and only after every one of its parents was recorded;
* every step whose parents have all been acked is released (no release is lost);
* the inputs a step is released with are its parents' results (a chord's callback:
  the members' results in member order);
* the workflow is ``succeeded`` exactly when every step is recorded;
* steps also fail for good (``wf_fail.lua``) and are replayed, with or without the
  resume that follows a replay (``wf_resume.lua``; without it, the step's success
  un-fails the workflow): the workflow is ``failed`` exactly while a failed step is
  not back, and its keys expire only once it has failed or succeeded.
"""

from __future__ import annotations

import json
import os

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from django_redisq.compat import task_backends
from django_redisq.store.broker import Broker
from django_redisq.store.keys import WorkflowKeys
from django_redisq.store.workflows import WorkflowStore
from django_redisq.workflows.canvas import chain, chord, compile_flow, group, release_call, step_id
from django_redisq.workflows.engine import WorkflowEngine
from django_redisq.workflows.enqueue import enqueue_workflow
from tests.helpers import keys
from tests.testapp import workflow_tasks as wt

EXAMPLES = int(os.environ.get("REDISQ_WF_SM_EXAMPLES", "25"))


def _leaf(i: int):
    return wt.add.using(queue_name="emails").s(i) if i % 3 == 1 else wt.add.s(i)  # two queues: default and emails


leaves = st.integers(0, 99).map(_leaf)
canvas = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3).map(lambda parts: chain(*parts)),
        st.lists(inner, min_size=1, max_size=3).map(lambda parts: group(*parts)),
        st.tuples(st.lists(inner, min_size=1, max_size=3), inner).map(lambda t: chord(t[0], t[1])),
    ),
    max_leaves=10,
)


def result_of(i: int) -> int:
    return 1000 + i


class WorkflowMachine(RuleBasedStateMachine):
    def __init__(self, r) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.r = r
        r.flushall()
        self.recorded: set[int] = set()
        self.acked: set[int] = set()
        self.failed: set[int] = set()  # failed for good, and neither resumed after a replay nor recorded since
        self.buried: set[int] = set()  # failed for good and not replayed: no worker delivers them
        self.steps: list = []
        self.wf = ""

    @initialize(node=canvas)
    def create(self, node) -> None:  # type: ignore[no-untyped-def]
        """A random workflow, stored and its first steps queued by the real enqueue."""
        backend = task_backends["default"]
        self.store = WorkflowStore(Broker(backend.conf))
        self.steps = compile_flow(node)
        self.wf = enqueue_workflow(backend, node).id

    def queued(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for q in ("default", "emails"):
            for tid in self.r.lrange(keys(q).pending, 0, -1):
                counts[tid] = counts.get(tid, 0) + 1
        return counts

    def _released(self) -> set[int]:
        return {int(t.rpartition(".")[2]) for t in self.queued()}

    def _run(self, i: int, crash: str) -> None:
        before = set(self.recorded)
        reply = self.store.done(self.wf, i, json.dumps(result_of(i)))
        self.recorded.add(i)
        self.failed.discard(i)
        for rel in reply.released:
            assert set(self.steps[rel.step].parents) <= before | {i}, "released before all its parents were recorded"
        if crash == "after_record":
            return
        for rel in reply.released:
            args, kwargs, delay = release_call(rel.spec, rel.inputs)
            step = self.steps[rel.step]
            if step.mode == "one":
                assert args[0] == result_of(step.parents[0])
            elif step.mode == "list":
                assert args[0] == [result_of(p) for p in step.parents]
            WorkflowEngine(self.store).enqueue_step(step_id(self.wf, rel.step), rel.spec, args, kwargs, delay)
        if crash == "after_release":
            return
        self.acked.add(i)

    @rule(data=st.data(), crash=st.sampled_from(["none", "none", "after_record", "after_release"]))
    def deliver(self, data, crash: str) -> None:  # type: ignore[no-untyped-def]
        """A released step runs (again, after a crash) and is settled, or its worker dies part-way."""
        todo = sorted(self._released() - self.acked - self.buried)
        if todo:
            self._run(data.draw(st.sampled_from(todo)), crash)

    @rule(data=st.data())
    def fail_for_good(self, data) -> None:  # type: ignore[no-untyped-def]
        """A released step that never succeeded runs out of retries: it fails its workflow (before its burial)."""
        todo = sorted(self._released() - self.recorded - self.buried)
        if todo:
            i = data.draw(st.sampled_from(todo))
            self.store.fail(self.wf, i, f"step {i} failed")
            self.failed.add(i)
            self.buried.add(i)

    @rule(data=st.data(), resumed=st.booleans())
    def replay(self, data, resumed: bool) -> None:  # type: ignore[no-untyped-def]
        """A dead step is replayed; the resume after it may be lost (a crash): the step's success then un-fails."""
        if self.buried:
            i = data.draw(st.sampled_from(sorted(self.buried)))
            self.buried.discard(i)
            if resumed:
                self.store.resume(self.wf, i)
                self.failed.discard(i)

    @rule(data=st.data())
    def late_duplicate(self, data) -> None:  # type: ignore[no-untyped-def]
        """An acked step is recorded and released again (a redelivery after a lost ack)."""
        if self.acked:
            self._run(data.draw(st.sampled_from(sorted(self.acked))), "none")

    @invariant()
    def released_once_and_in_order(self) -> None:
        for tid, n in self.queued().items():
            assert n == 1, f"{tid} queued {n} times"
        for i in self._released():
            assert set(self.steps[i].parents) <= self.recorded

    @invariant()
    def nothing_lost(self) -> None:
        released = self._released()
        for s in self.steps:
            if set(s.parents) <= self.acked:
                assert s.index in released, f"step {s.index} lost: parents {s.parents} acked"

    @invariant()
    def succeeded_when_all_done(self) -> None:
        status = self.r.hget(WorkflowKeys(self.wf).meta, "status")
        assert (status == "succeeded") == (self.recorded == {s.index for s in self.steps}), status

    @invariant()
    def failed_while_a_failed_step_is_not_back(self) -> None:
        status = self.r.hget(WorkflowKeys(self.wf).meta, "status")
        assert (status == "failed") == bool(self.failed), (status, self.failed)
        kept = self.r.ttl(WorkflowKeys(self.wf).meta)
        assert (kept > 0) == (status in ("failed", "succeeded")), (status, kept)  # running: kept until it ends


def test_workflow_completion_state_machine(r) -> None:  # type: ignore[no-untyped-def]
    run_state_machine_as_test(lambda: WorkflowMachine(r), settings=settings(
        max_examples=EXAMPLES, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))


def test_fail_then_replayed_step_unfails_and_cancel_and_adopt(r) -> None:  # type: ignore[no-untyped-def]
    """wf_fail / wf_cancel / wf_adopt on each topology: the answers the worker and the enqueuer act on."""
    backend = task_backends["default"]
    store = WorkflowStore(Broker(backend.conf))
    wf = enqueue_workflow(backend, chain(wt.add.s(1), wt.add.s(2)), wt.on_failure.s("n")).id
    status, on_error, first = store.fail(wf, 0, "step 0 failed")
    assert (status, first) == ("failed", True) and on_error is not None and on_error.task == wt.on_failure.module_path
    assert store.fail(wf, 0, "again")[2] is False  # failed once; on_error given again (queued by id: once)
    assert 0 < r.pttl(WorkflowKeys(wf).meta)
    assert store.resume(wf, 0) == "resumed" and r.ttl(WorkflowKeys(wf).meta) == -1  # replayed: runs again
    assert store.fail(wf, 0, "failed again")[2] is True
    reply = store.done(wf, 0, "1")  # the replayed step succeeded (no resume ran this time): the workflow carries on
    assert reply.status == "running" and [x.step for x in reply.released] == [1] and r.ttl(WorkflowKeys(wf).meta) == -1
    assert store.cancel(wf, "t") == "running" and store.done(wf, 1, "3").status == "cancelled"

    parent = wt.add.enqueue(5)
    assert store.adopt("default", parent.id, wf, 0) == ("pending", "null")
    assert json.loads(r.hget(keys().task(parent.id), "metadata"))["_workflow"] == [[wf, 0]]
    assert store.adopt("default", "nope", wf, 0)[0] == "missing"
