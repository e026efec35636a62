"""The workload and the verdict of the fault-injection test (tests/worker/test_fault_injection.py).

``enqueue_workload`` puts plain tasks, a chain, a chord, a failing chain and published events into the queues;
``verdict`` reads Redis alone (never a reader that repairs, such as ``WorkflowResult.refresh``) and names every
broken promise: a task not ended, a task run more than ``RETRIES + 1`` times, a workflow step begun before a parent
ended, an event that became no task (or two), anything still held.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from django_redisq import chain, chord
from django_redisq.events.publish import publish
from django_redisq.events.subscriptions import subscriptions_of
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import TopicKeys
from django_redisq.store.workflows import WorkflowStore
from django_redisq.workflows.canvas import step_id
from tests.helpers import keys
from tests.testapp import fault_tasks as ft

TOPIC = "faults.topic"
SUBSCRIPTIONS = {"faults-sub": {"topic": TOPIC, "task": "tests.testapp.fault_tasks.on_event", "start": "earliest"}}
BUDGET = ft.RETRIES + 1
"""Runs a task may have, at most: no worker dies in this test, so nothing explains one more."""
FINAL = ("finished", "dead")
QUEUES = ("default", "emails", "low")


@dataclass
class Workload:
    tasks: list[tuple[str, str]] = field(default_factory=list)  # (queue, id) of plain tasks
    workflows: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # entry ids


def enqueue_workload(bad_results: tuple[str, ...] = ()) -> Workload:
    """The plain mix (or tasks returning each of ``bad_results``), two workflows that succeed, one that fails, events."""
    w = Workload()
    if bad_results:
        plain = [ft.bad_result.enqueue(kind) for kind in bad_results] + [ft.ok.enqueue(1)]
        flows = [chain(ft.bad_result.s(bad_results[0]), ft.plus.s()).enqueue()]
    else:
        plain = [ft.ok.enqueue(i) for i in range(3)] + [ft.flaky.enqueue(9), ft.fails.enqueue(0)]
        flows = [chain(ft.ok.s(1), ft.plus.s(), ft.plus.s(2)).enqueue(),
                 chord([ft.ok.s(i) for i in range(3)], ft.total.s()).enqueue(),
                 chain(ft.fails.s(5), ft.plus.s()).enqueue()]
    w.tasks = [(p.task.queue_name, p.id) for p in plain]
    w.workflows = [f.id for f in flows]
    w.events = [publish(TOPIC, {"n": i}) for i in range(3)]
    return w


def _state(r: redis.Redis, queue: str, task_id: str) -> str | None:
    return r.hget(keys(queue).task(task_id), "state")


def runs(r: redis.Redis) -> dict[str, int]:
    return {k: int(v) for k, v in r.hgetall("faults:runs").items()}


def looped(r: redis.Redis) -> dict[str, int]:
    """Tasks run more often than their budget (a loop shows here long before any timeout)."""
    return {tid: n for tid, n in runs(r).items() if n > BUDGET}


def _event_tasks(r: redis.Redis, w: Workload) -> list[str]:
    problems = []
    sub = next(s for s in subscriptions_of(get_options("default")) if s.name == "faults-sub")
    for entry in w.events:
        found = [k for k in r.scan_iter(match=keys(sub.queue).task(f"{sub.id_base}*-{entry}"), count=1000)]
        states = [r.hget(k, "state") for k in found]
        if len(found) != 1 or states[0] not in FINAL:
            problems.append(f"event {entry}: tasks {found} in states {states} (one, ended, expected)")
    return problems


def _recorded_then_unsettled(r: redis.Redis, queue: str, tid: str, st: str | None, step: int, done: set[int]) -> bool:
    """A step that ran, was recorded done in its workflow (its dependents released: the record comes before the ack,
    so a crash between cannot lose them) and whose own ack then failed for good: its task is dead with reason
    ``settle_failed`` while the workflow, which has its result, may end succeeded. It ended, and says why."""
    return st == "dead" and step in done and r.hget(keys(queue).task(tid), "reason") == "settle_failed"


def _workflow(r: redis.Redis, store: WorkflowStore, wf: str, log: list[str]) -> list[str]:
    state = store.read(wf)
    if state is None:
        return [f"workflow {wf} is gone"]
    status = state.meta.get("status")
    problems = [] if status in ("succeeded", "failed") else [f"workflow {wf} is {status!r}, not ended"]
    first_start = {}
    first_end = {}
    for n, line in enumerate(log):
        what, tid = line.split("|", 1)
        (first_start if what == "start" else first_end).setdefault(tid, n)
    for i, info in enumerate(state.steps):
        tid = info.get("id") or step_id(wf, i)
        st = _state(r, info.get("q", "default"), tid)
        if st is not None and st not in FINAL:
            problems.append(f"workflow {wf} step {i} ({tid}) is {st}")
        if status == "succeeded" and st != "finished" and not _recorded_then_unsettled(r, info.get("q", "default"), tid, st, i, state.done):
            problems.append(f"workflow {wf} succeeded but step {i} ({tid}) is {st}")
        for p in info.get("p", []):
            ptid = state.steps[p].get("id") or step_id(wf, p)
            if tid in first_start and not first_end.get(ptid, 1 << 60) < first_start[tid]:
                problems.append(f"workflow {wf} step {i} began before its parent {p} ended")
    return problems


def held(r: redis.Redis) -> list[str]:
    """Processing lists that are not empty, and task hashes left pending, scheduled or running."""
    out = [f"{k} holds {r.lrange(k, 0, -1)}" for k in r.scan_iter(match="redisq:{*}:processing:*", count=1000)
           if r.type(k) == "list" and r.llen(k)]
    for q in QUEUES:
        for k in r.scan_iter(match=keys(q).task("*"), count=1000):
            if r.type(k) == "hash" and (st := r.hget(k, "state")) not in FINAL:
                out.append(f"{k} is {st}")
    return out


def verdict(r: redis.Redis, w: Workload) -> list[str]:
    """Every broken promise, in words; [] when the run kept them all."""
    problems = [f"task {tid} ran {n} times (budget {BUDGET})" for tid, n in looped(r).items()]
    problems += [f"task {tid} of {q} is {st}" for q, tid in w.tasks if (st := _state(r, q, tid)) not in FINAL]
    store = WorkflowStore(Broker(get_options("default")))
    log = r.lrange("faults:log", 0, -1)
    for wf in w.workflows:
        problems += _workflow(r, store, wf, log)
    problems += _event_tasks(r, w)
    problems += held(r)
    stream = TopicKeys(TOPIC).stream
    pending = r.xpending(stream, "faults-sub") if r.exists(stream) else None
    if pending and pending.get("pending"):
        problems.append(f"{pending['pending']} entr(ies) of {TOPIC} never acknowledged")
    return problems


def ended(r: redis.Redis, w: Workload) -> bool:
    """Whether the run is over: every promise kept, or a loop already proves one broken."""
    return bool(looped(r)) or not verdict(r, w)


def describe(r: redis.Redis, w: Workload, limit: int = 12) -> str:
    problems = verdict(r, w)
    extra = f" (+{len(problems) - limit} more)" if len(problems) > limit else ""
    return "; ".join(problems[:limit]) + extra
