"""Every task ends, done or dead, never a loop (invariant 16 (docs/explanation/architecture.md)), whatever step of its life raises.

An in-process worker (threads, events on) runs a mix of plain tasks, a chain, a chord, a failing chain and
published events while tests/faults.py makes one chosen step of fetch, run, settle (ack, retry, bury), workflow
release (done, release, enqueue_step, fail) or the event pump (topic read and ack, the pump's enqueue) raise: a
transient Redis error, a non-transient error reply, ``UnicodeEncodeError``, ``RecursionError`` or a plain bug, on the
first call, on a later one, or at random from a seeded ``random``. Tasks returning what cannot be stored (a lone
surrogate, a value JSON cannot hold, an oversized or too deeply nested value) are cases of their own.

Each case then checks, reading Redis alone (tests/worker/fault_checks.py): every task ended (finished or dead)
within ``max_retries + 1`` runs, counted by the tasks themselves in a hash of their own; every workflow ended, no
step began before its parents ended; every event became exactly one task, ended, and its entry was acknowledged;
nothing is left in a processing list or pending, scheduled or running; every thread the worker started is still
alive. A case whose rules never fired fails too: a harness that injects nothing proves nothing.
"""

from __future__ import annotations

import copy
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.test import override_settings

from django_redisq import connection
from django_redisq.worker.worker import Worker
from tests.helpers import wait_for
from tests.testapp import fault_tasks as ft
from tests.worker import fault_checks as fc
from tests.worker.faults import EXCEPTIONS, TRANSIENT, FaultPlan, Rule, injecting

pytestmark = [pytest.mark.fault_run, pytest.mark.timeout(120)]

SETTLED_WITHIN = 12.0
"""Seconds a case may take to end once its faults fired (a fixed engine ends each in about a second or two)."""


@contextmanager
def fault_settings() -> Iterator[None]:
    """TASKS with the test's subscription and a fast heartbeat (a sweep every 0.1 s; a reap only after 3 s, so a loaded machine's late beat is not a death)."""
    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["OPTIONS"]["IMPORTS"] = [*tasks["default"]["OPTIONS"].get("IMPORTS", []), "tests.testapp.fault_tasks"]
    tasks["default"]["OPTIONS"].update(SUBSCRIPTIONS=fc.SUBSCRIPTIONS, TOPICS={fc.TOPIC: {}},
                                       HEARTBEAT_INTERVAL=0.1, WORKER_TIMEOUT=3.0)
    with override_settings(TASKS=tasks):
        yield
    connection.reset()


def run_case(r, plan: FaultPlan, bad_results: tuple[str, ...] = ()) -> tuple[list[str], list[str], FaultPlan]:
    """Run the workload under ``plan``; (broken promises, dead worker threads, the plan with its counts)."""
    with fault_settings(), injecting(plan):
        workload = fc.enqueue_workload(bad_results)
        before = set(threading.enumerate())
        worker = Worker(list(fc.QUEUES), concurrency=2, events=True, scheduler=False)
        runner = threading.Thread(target=worker.run, name="redisq-test-run", daemon=True)
        runner.start()
        try:
            assert wait_for(lambda: any(t.name == "redisq-settle" for t in threading.enumerate()), timeout=10)
            wait_for(lambda: fc.ended(r, workload), timeout=SETTLED_WITHIN, step=0.05)
            problems = fc.verdict(r, workload)
            alive = {t.name for t in set(threading.enumerate()) - before if t.is_alive()}
            dead = sorted(n for n in _expected_threads(worker) if n not in alive)
        finally:
            worker.request_stop()
            runner.join(30)
    return problems, dead, plan


def _expected_threads(worker: Worker) -> list[str]:
    """The names of the threads a serving worker keeps running until it stops (Worker.run)."""
    names = ["redisq-heartbeat", "redisq-settle", "redisq-marks", "redisq-pauses", "redisq-handback"]
    names += [f"redisq-fetch-{q}" for q in worker.queues] + [f"redisq-exec-{i}" for i in range(worker.pool.lanes)]
    if worker.pump is not None:
        names += [t.name for t in worker.pump.threads()]
    return names


def _assert_kept(r, plan: FaultPlan, problems: list[str], dead_threads: list[str], every_rule: bool = True) -> None:
    assert not every_rule or not plan.silent(), f"rules that never fired (the workload never reached them): {plan.silent()}"
    assert not dead_threads, f"worker threads died: {dead_threads}"
    assert not problems, f"{len(problems)} broken promise(s) after {dict(plan.injected)} injected fault(s): " + "; ".join(problems[:15])


SETTLE = ["broker.ack_many", "broker.retry", "broker.bury"]
WORKFLOW = ["workflows.done", "workflows.release", "workflows.enqueue_step", "workflows.fail"]
PERMANENT = [e for e in EXCEPTIONS if e not in TRANSIENT]
ALWAYS = 10**6
"""``times`` of a step that raises at every call (a poison the step meets each time): another step must end the task."""

CASES: list[tuple[str, list[Rule]]] = [
    # a settle step that always raises something that would repeat: the task must still end, retried or dead
    *[(f"ack_many-always-{e}", [Rule("broker.ack_many", e, nth=1, times=ALWAYS)]) for e in ("response", "unicode", "recursion", "bug")],
    ("retry-always-response", [Rule("broker.retry", "response", nth=1, times=ALWAYS)]),
    # once or twice: one extra run is already one beyond the budget of a task on its last attempt
    ("ack_many-once-response", [Rule("broker.ack_many", "response", nth=1)]),
    ("bury-once-response", [Rule("broker.bury", "response", nth=1)]),
    ("bury-twice-unicode", [Rule("broker.bury", "unicode", nth=1, times=2)]),
    # workflow release: recording a step, queueing its dependents, failing the workflow
    *[(f"workflows.done-always-{e}", [Rule("workflows.done", e, nth=1, times=ALWAYS)]) for e in ("response", "recursion")],
    *[(f"{t}-always-response", [Rule(t, "response", nth=1, times=ALWAYS)]) for t in ("workflows.release", "workflows.enqueue_step")],
    # once: a workflow whose failing failed must still end failed (and queue its on_error), not stay running
    ("workflows.fail-once-response", [Rule("workflows.fail", "response", nth=1)]),
    # the event pump: a read or an ack that fails, an enqueue of an event's task that fails
    ("topics.read-twice-response", [Rule("topics.read", "response", nth=1, times=2)]),
    ("topics.ack-once-bug", [Rule("topics.ack", "bug", nth=1)]),
    ("pump-enqueue-response", [Rule("broker.enqueue", "response", nth=1, threads="redisq-events")]),
    ("pump-enqueue-recursion", [Rule("broker.enqueue", "recursion", nth=1, times=2, threads="redisq-events")]),
    # transient errors: the step is tried again until it lands, and costs no run beyond the budget
    ("ack_many-transient", [Rule("broker.ack_many", "connection", nth=1, times=3)]),
    ("workflows.release-transient", [Rule("workflows.release", "timeout", nth=1, times=3)]),
    # the step landed and its reply was lost: the repeat must be harmless
    *[(f"{t}-lost-reply", [Rule(t, "timeout", nth=1, after=True)])
      for t in ("broker.ack_many", "broker.bury", "workflows.done", "broker.fetch")],
    # fetching and running
    ("fetch-bug", [Rule("broker.fetch", "bug", nth=2)]),
    ("runner-bug", [Rule("runner.run", "bug", nth=2)]),
]


@pytest.mark.parametrize("rules", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_a_step_that_raises_never_makes_a_task_loop(r, rules):
    problems, dead, plan = run_case(r, FaultPlan(rules))
    _assert_kept(r, plan, problems, dead)


@pytest.mark.parametrize("seed", range(3))
def test_random_faults_everywhere(r, seed):
    """Each settle, workflow and pump step raises with a probability, a kind drawn from the seed, twice at most."""
    rng = random.Random(seed)
    rules = [Rule(t, rng.choice(list(EXCEPTIONS)), probability=0.25, limit=2)
             for t in (*SETTLE, *WORKFLOW[:3], "topics.read", "topics.ack", "broker.fetch")]
    problems, dead, plan = run_case(r, FaultPlan(rules, seed=seed))
    assert sum(plan.injected.values()) >= 3, f"seed {seed}: only {dict(plan.injected)} injected"
    _assert_kept(r, plan, problems, dead, every_rule=False)  # chance may spare a step; enough others fired


@pytest.mark.parametrize("kind", ["surrogate", "surrogate_key", "object", "oversized", "nested"])
def test_a_result_that_cannot_be_stored_fails_the_attempt(r, kind):
    """No fault injected: the task's own return value is the poison; it must end (dead or failed) within its budget."""
    problems, dead, _ = run_case(r, FaultPlan([]), bad_results=(kind,))
    assert not dead, f"worker threads died: {dead}"
    assert not problems, f"{len(problems)} broken promise(s): " + "; ".join(problems[:15])


def test_the_harness_injects_what_it_is_told(r):
    """Self-check: three faults asked on the 1st to 3rd ack are three raised, on worker threads only, and the
    transient ones cost no run beyond the budget (the engine retries them)."""
    plan = FaultPlan([Rule("broker.ack_many", "connection", nth=1, times=3)])
    problems, dead, plan = run_case(r, plan)
    assert plan.injected["broker.ack_many"] == 3 and plan.calls["broker.ack_many"] >= 4
    _assert_kept(r, plan, problems, dead)


def test_one_bad_member_never_holds_back_its_batch(r):
    """A task whose result cannot be stored, acked in one batch with good ones (one lane, a backlog): each good one
    runs once. On 7929b28 the whole batch's ack raised, the sweep handed every member back as a lost fetch (its
    delivery undone) and the good ones ran again with the bad one, batch after batch: about 25 runs each in 5 s."""
    with fault_settings():
        good = [ft.ok.enqueue(i) for i in range(12)]
        bad = ft.bad_result.enqueue("surrogate")
        good += [ft.ok.enqueue(i) for i in range(12, 24)]
        worker = Worker(["default"], concurrency=1, prefetch=32, events=False, scheduler=False)
        runner = threading.Thread(target=worker.run, name="redisq-test-run", daemon=True)
        runner.start()
        try:
            ids = {g.id for g in good}
            wait_for(lambda: all(r.hget(f"redisq:{{default}}:t:{i}", "state") in fc.FINAL for i in [*ids, bad.id]), timeout=5)
            twice = {i: n for i, n in fc.runs(r).items() if i in ids and n > 1}
        finally:
            worker.request_stop()
            runner.join(30)
    assert not twice, f"good tasks acked with a bad one ran again: {twice}"
