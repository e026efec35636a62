"""Workflows and events in the chaos run (bench/chaos.py ``--flows N``): produce them, then account for them.

``produce_flows`` (the process ``chaos.py flows``) creates, over the run, chains of four steps and chords of four
members and a callback (tests/testapp/chaos_flow_tasks.py) and publishes events to a topic that two
subscriptions turn into tasks, retrying a call that raised, and records what it made in the effects store
(``chaos:flows``, ``chaos:events``). ``account_flows`` then reads both stores and counts, for workflow steps and
for events, what is lost (never ran, or its workflow never ended / its entry never became a task), looped (ran
more often than its retries allow, with no kill to explain it), doubled (completed twice) and unexplained (doubled
or looped with no fault of bench/chaos.py's ``EXPLAINERS`` between its first start and its last end), and steps
begun before a parent ended (early: must be 0). One task in ``POISON_EVERY`` workflows returns a lone surrogate
(``chaos:poison``): it must end (finished or dead) within its retries; ``not_ended`` and ``looped`` count those that
did not (issue 36: a settle step that fails for good used to hand the task back to run again, for ever).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
import time
from collections import Counter, defaultdict
from typing import Any

import redis

TOPIC = "chaos.flows"
SUBSCRIPTIONS = {f"chaos-{n}": {"topic": TOPIC, "task": "tests.testapp.chaos_flow_tasks.chaos_event", "start": "earliest"}
                 for n in ("a", "b")}
"""Two subscriptions of one topic: each event must become two tasks, each run once (invariant 14 (docs/explanation/architecture.md))."""
TOPICS = {TOPIC: {}}
SETTINGS = "tests.chaos_worker_settings"
"""The settings of every process of a run with flows: the flows' tasks among the modules a worker imports."""
RUNS_ALLOWED = 3  # chaos_flow_tasks.RETRIES + 1
POISON_EVERY = 10
"""One task returning a lone surrogate (chaos_flow_tasks.chaos_poison) per this many workflows: it must end, not loop."""


def produce_flows(count: int, seconds: float, seed: int) -> None:
    """Enqueue ``count`` workflows (chains and chords, alternately) and ``count`` events, spread over ``seconds``."""
    from django_redisq import chain, chord
    from django_redisq.events.publish import publish
    from tests.testapp import chaos_flow_tasks as cf
    from tests.testapp.chaos_tasks import effects_store

    store, rng = effects_store(), random.Random(seed)
    start = time.monotonic()
    for i in range(count):
        if i % 2:
            flow = lambda i=i: chord([cf.flow_step.s(i, j) for j in range(4)], cf.flow_step.s()).enqueue()
        else:
            flow = lambda i=i: chain(cf.flow_step.s(i), *[cf.flow_step.s() for _ in range(3)]).enqueue()
        made = _retrying(flow)
        if made is not None:
            store.rpush("chaos:flows", made.id)
        if i % POISON_EVERY == POISON_EVERY - 1:
            poison = _retrying(lambda i=i: cf.chaos_poison.enqueue(i))
            if poison is not None:
                store.rpush("chaos:poison", poison.id)
        entry = _retrying(lambda i=i: publish(TOPIC, {"n": i}))
        if entry is not None:
            store.rpush("chaos:events", entry)
        ahead = (i + 1) * seconds / count - (time.monotonic() - start) + rng.uniform(0, 0.05)
        if ahead > 0:
            time.sleep(ahead)


def _retrying(call: Any) -> Any:
    for attempt in range(120):  # about a minute of Redis being away
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - any failure is retried; a workflow created twice is two workflows
            if attempt == 0:
                print(f"flows: {type(exc).__name__}: {exc}; retrying", file=sys.stderr, flush=True)
            time.sleep(0.5)
    print("flows: gave up after a minute", file=sys.stderr, flush=True)
    return None


def _runs(e: redis.Redis, what: str) -> dict[str, list[tuple[int, int]]]:
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for line in e.lrange(f"chaos:f{what}", 0, -1):
        tid, ms, pid = line.rsplit("|", 2)
        out[tid].append((int(ms), int(pid)))
    return out


def _explained(tid: str, starts: list[tuple[int, int]], ends: list[tuple[int, int]], faults: list[Any], explainers: tuple[str, ...],
               extra: int = 1) -> bool:
    """``extra`` runs beyond the allowed are explained by as many faults that can cause one, between the first start
    and the last end (a kill: only of a process that ran it). One fault explains one run, so a loop stays a loop."""
    lo = starts[0][0] / 1000 - 1.0
    hi = max(ms for ms, _ in (ends or starts)) / 1000 + 1.0
    pids = {pid for _, pid in starts}
    causes = [f for f in faults if f.kind in explainers and lo <= f.t <= hi
              and (f.kind not in ("sigkill", "same_name_restart") or f.pid in pids)]
    return len(causes) >= extra


def account_flows(main_url: str, effects_url: str, faults: list[Any], explainers: tuple[str, ...]) -> dict[str, Any]:
    """Per kind (workflow steps, events, poison tasks): made, lost, looped, doubled, unexplained, early; examples of each."""
    m = redis.Redis.from_url(main_url, decode_responses=True)
    e = redis.Redis.from_url(effects_url, decode_responses=True)
    starts, ends = _runs(e, "starts"), _runs(e, "ends")
    steps, events, poison = Counter(), Counter(), Counter()
    examples: dict[str, list[str]] = defaultdict(list)

    def judge(kind: Counter[str], tid: str, must_run: bool) -> None:
        s, d = starts.get(tid, []), ends.get(tid, [])
        if must_run and not d:
            kind["lost"] += 1
            examples["lost"].append(tid)
        if len(s) > RUNS_ALLOWED or len(d) > 1:
            kind["looped" if len(s) > RUNS_ALLOWED else "doubled"] += 1
            if not _explained(tid, s, d, faults, explainers, max(len(s) - RUNS_ALLOWED, len(d) - 1)):
                kind["unexplained"] += 1
                examples["unexplained"].append(f"{tid} starts={len(s)} ends={len(d)}")

    for wf in e.lrange("chaos:flows", 0, -1):
        base = f"redisq:{{wf:{wf}}}"
        meta = m.hgetall(f"{base}:meta")
        total = int(meta.get("total") or 0)
        steps["made"] += total
        if meta.get("status") != "succeeded":
            steps["workflows_not_succeeded"] += 1
            examples["workflow"].append(f"{wf} {meta.get('status')}")
        for parent, children in m.hgetall(f"{base}:deps").items():
            first_end = min((ms for ms, _ in ends.get(f"{wf}.{parent}", [])), default=None)
            for child in json.loads(children):
                first_start = min((ms for ms, _ in starts.get(f"{wf}.{child}", [])), default=None)
                if first_start is not None and (first_end is None or first_start < first_end):
                    steps["early"] += 1
                    examples["early"].append(f"{wf}.{child} began before {wf}.{parent} ended")
        for i in range(total):
            judge(steps, f"{wf}.{i}", must_run=meta.get("status") in ("succeeded", "running"))
    entries = e.lrange("chaos:events", 0, -1)
    tasks_of: dict[str, list[str]] = defaultdict(list)
    for name in SUBSCRIPTIONS:  # ids as subscriptions.Subscription.task_id spells them: <base><generation>-<entry>
        base = "e" + hashlib.sha256(f"{TOPIC}:{name}".encode()).hexdigest()[:12] + "-"
        for key in m.scan_iter(match=f"redisq:{{default}}:t:{base}*", count=1000):
            tid = key.split(":t:", 1)[1]
            tasks_of[tid[len(base):].split("-", 1)[1]].append(tid)
    for entry in entries:
        events["made"] += 1
        found = tasks_of.get(entry, [])
        if len(found) != len(SUBSCRIPTIONS):
            events["lost" if len(found) < len(SUBSCRIPTIONS) else "doubled"] += 1
            examples["event"].append(f"{entry}: {len(found)} task(s)")
        for tid in found:
            if m.hget(f"redisq:{{default}}:t:{tid}", "state") != "dead":
                judge(events, tid, must_run=True)
    for tid in e.lrange("chaos:poison", 0, -1):
        poison["made"] += 1
        state, runs = m.hget(f"redisq:{{default}}:t:{tid}", "state"), starts.get(tid, [])
        if state not in ("finished", "dead"):
            poison["not_ended"] += 1  # still held, pending or scheduled, however many runs it had
            examples["poison"].append(f"{tid} {state} after {len(runs)} runs")
        if len(runs) > RUNS_ALLOWED:  # its retries (if it is retried at all) and no more: a second run is no double here
            poison["looped"] += 1
            if not _explained(tid, runs, ends.get(tid, []), faults, explainers, len(runs) - RUNS_ALLOWED):
                poison["unexplained"] += 1
                examples["unexplained"].append(f"{tid} (poison) starts={len(runs)}")
    m.close()
    e.close()
    return {"steps": dict(steps), "events": dict(events), "poison": dict(poison),
            "examples": {k: v[:5] for k, v in examples.items()}}


def flow_checks(r: dict[str, Any]) -> list[str]:
    """What the flows broke: lost, unexplained, early steps, workflows that did not succeed."""
    out = []
    for kind in ("steps", "events", "poison"):
        c = r.get(kind, {})
        for what in ("lost", "not_ended", "unexplained", "early", "workflows_not_succeeded"):
            if c.get(what):
                out.append(f"{kind}: {c[what]} {what}")
    return out


def flow_table(r: dict[str, Any]) -> str:
    rows = []
    for kind in ("steps", "events", "poison"):
        c = r.get(kind, {})
        rows.append(f"  {kind:<8} made {c.get('made', 0):>5}  lost {c.get('lost', 0)}  looped {c.get('looped', 0)}  "
                    f"doubled {c.get('doubled', 0)}  unexplained {c.get('unexplained', 0)}  early {c.get('early', 0)}"
                    + (f"  workflows not succeeded {c['workflows_not_succeeded']}" if c.get("workflows_not_succeeded") else "")
                    + (f"  not ended {c['not_ended']}" if c.get("not_ended") else ""))
    return "workflows and events:\n" + "\n".join(rows)
