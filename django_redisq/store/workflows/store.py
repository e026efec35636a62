"""A workflow's Redis steps: create, start, a step done, a step failed, cancel, and reads.

Each step is one script on the workflow's own slot (``{wf:<id>}``, keys.py's
``WorkflowKeys``); the workflow's steps are ordinary tasks queued through the
``Broker`` in their own queues' slots, so a workflow may span queues and
Cluster nodes. Nothing here touches two slots in one script: releasing a step
into its queue is a separate, idempotent enqueue by its deterministic task id
(enqueue.lua answers ``'!'`` for an id that exists), done by the workflow engine
(workflows/engine.py) after ``done`` answered: building a step's task is the
engine's work, this module only stores and reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django_redisq.core.message import dumps
from django_redisq.store.broker.broker import Broker
from django_redisq.store.keys import WorkflowKeys
from django_redisq.store.scripts.runner import ms
from django_redisq.store.workflows.shapes import HEADER_FIELDS, Adopted, DoneReply, Failed, Released, WorkflowHeader, WorkflowState
from django_redisq.workflows.canvas import MARKER, markers
from django_redisq.workflows.spec import StepSpec

FAILED_KEPT = 30 * 86400.0
"""Seconds a failed workflow's keys are kept when DEAD_LETTER_TTL is 0 (its dead letters are then kept until
trimmed by DEAD_LETTER_MAX): a replay within this time still finds the workflow; after it, the replayed step runs alone."""
PROVISIONAL_MS = 3_600_000
"""TTL of a new workflow's keys until its first steps are queued (wf_start.lua makes them last)."""
INDEX_KEPT = 10_000
"""Workflows the admin's list keeps, the newest (wf_index.lua trims the rest from the list, not from Redis)."""


class WorkflowStore:
    """The workflow steps of one backend, on its broker's client and scripts."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def keys(self, workflow_id: str) -> WorkflowKeys:
        return WorkflowKeys(workflow_id, self.broker.options.key_prefix)

    def _run(self, script: str, workflow_id: str, args: Sequence[Any]) -> Any:
        return self.broker.scripts.run(script, keys=self.keys(workflow_id).all(), args=list(args))

    def create(self, workflow_id: str, steps: list[dict[str, Any]], specs: dict[int, StepSpec],
               children: dict[int, list[int]], on_error: StepSpec | None) -> bool:
        """Store a new workflow (provisional TTL: ``start`` follows once its first steps are queued)."""
        argv: list[Any] = [len(steps), json.dumps(steps, separators=(",", ":")),
                           on_error.dumps() if on_error else "", PROVISIONAL_MS, len(specs)]
        for index, spec in specs.items():
            argv += [index, spec.dumps()]
        for index, spec in specs.items():
            argv += [index, len(spec.parents)]
        for index, kids in children.items():
            if kids:
                argv += [index, json.dumps(kids)]
        created = bool(self._run("wf_create", workflow_id, argv))
        if created:  # the count and the list live in another slot: after the creation, as the other counts
            self.count("created")
            self.broker.scripts.run("wf_index", keys=[WorkflowKeys.index(self.broker.options.key_prefix)],
                                    args=[workflow_id, INDEX_KEPT])
        return created

    def start(self, workflow_id: str) -> str:
        return str(self._run("wf_start", workflow_id, []))

    def done(self, workflow_id: str, step: int, result_json: str) -> DoneReply:
        """Record ``step`` as done; every waiting step whose parents are now all done (see wf_done.lua)."""
        reply = self._run("wf_done", workflow_id, [step, result_json, ms(self.broker.options.result_ttl)])
        released = [Released(int(reply[i]), StepSpec.parse(reply[i + 1]), json.loads(reply[i + 2]))
                    for i in range(1, len(reply) - 2, 3)]
        status = str(reply[0])
        if status in ("ended", "resumed", "ended_resumed"):
            self.count("succeeded" if status != "resumed" else "", "resumed" if status != "ended" else "")
        return DoneReply({"resumed": "running", "ended_resumed": "ended"}.get(status, status), released)

    def adopt(self, queue: str, task_id: str, workflow_id: str, step: int) -> Adopted:
        """Mark task ``task_id`` of ``queue`` (enqueued earlier) as step ``step`` of the workflow (wf_adopt.lua).

        The metadata is read, extended here (JSON in Python, so the user's values keep their
        exact form) and written only if unchanged meanwhile.
        """
        tkey = self.broker.keys(queue).task(task_id)
        for _ in range(20):
            saved, msg = self.broker.client.hmget(tkey, ["metadata", "msg"])
            meta: Any = None
            try:
                meta = json.loads(saved) if saved else (json.loads(msg).get("m") if msg else None)
            except (ValueError, AttributeError, RecursionError):
                meta = None
            meta = dict(meta) if isinstance(meta, dict) else {}
            pairs = meta.get(MARKER) if isinstance(meta.get(MARKER), list) else []
            meta[MARKER] = [*pairs, [workflow_id, step]]
            reply = self.broker.scripts.run("wf_adopt", keys=[tkey], args=[saved or "", dumps(meta)])
            if reply[0] != "changed":
                return Adopted(str(reply[0]), str(reply[1]) if len(reply) > 1 else "null")
        return Adopted("changed", "null")

    def fail(self, workflow_id: str, step: int, error: str) -> Failed:
        """Fail the workflow for ``step`` (wf_fail.lua)."""
        o = self.broker.options
        ttl = max(o.result_ttl, o.dead_letter_ttl) if o.dead_letter_ttl else FAILED_KEPT
        status, on_error, first = self._run("wf_fail", workflow_id, [step, error[:2000], ms(ttl)])
        if int(first):
            self.count("failed")
        return Failed(str(status), (StepSpec.parse(on_error) if on_error else None), bool(int(first)))

    def resume(self, workflow_id: str, step: int) -> str:
        """A failed step was replayed: the workflow runs again once no failed step is left (wf_resume.lua)."""
        status = str(self._run("wf_resume", workflow_id, [step]))
        if status == "resumed":
            self.count("resumed")
        return status

    def replayed_steps(self, queue: str, ids: Sequence[str], dead: bool = False) -> list[tuple[str, int, str]]:
        """The ``(workflow, step, task id)`` of those ``ids`` of ``queue`` that are workflow steps and no longer dead
        (``dead``: that are dead), in one round trip."""
        pipe = self.broker.client.pipeline(transaction=False)
        for task_id in ids:
            pipe.hmget(self.broker.keys(queue).task(task_id), ["state", "msg", "metadata"])
        found = []
        for task_id, (state, msg, metadata) in zip(ids, pipe.execute(), strict=True):
            if state and (state == "dead") == dead:
                found += [(wf, step, task_id) for wf, step in markers(msg or "", metadata or "")]
        return found

    def cancel(self, workflow_id: str, who: str) -> str:
        before = str(self._run("wf_cancel", workflow_id, [who, ms(self.broker.options.result_ttl)]))
        if before in ("running", "failed"):
            self.count("cancelled", "cancelled_failed" if before == "failed" else "")
        return before

    def count(self, *fields: str) -> None:
        """Bump the fleet-wide transition counts (after the transition: a crash in between loses a count, never a step)."""
        key = WorkflowKeys.totals(self.broker.options.key_prefix)
        for name in fields:
            if name:
                self.broker.client.hincrby(key, name, 1)

    def totals(self) -> dict[str, int]:
        """created, succeeded, failed, resumed, cancelled, cancelled_failed, and ``running`` derived from them."""
        raw = self.broker.client.hgetall(WorkflowKeys.totals(self.broker.options.key_prefix))
        t = {name: int(raw.get(name, 0)) for name in ("created", "succeeded", "failed", "resumed", "cancelled", "cancelled_failed")}
        t["running"] = max(0, t["created"] - t["succeeded"] - t["failed"] + t["resumed"] - (t["cancelled"] - t["cancelled_failed"]))
        return t

    def status(self, workflow_id: str) -> str | None:
        found = self.broker.client.hget(self.keys(workflow_id).meta, "status")
        return None if found is None else str(found)

    def read(self, workflow_id: str) -> WorkflowState | None:
        """The workflow's meta, done and failed steps (one round trip; bounded by the workflow's size)."""
        k = self.keys(workflow_id)
        pipe = self.broker.client.pipeline(transaction=False)
        pipe.hgetall(k.meta)
        pipe.smembers(k.done)
        pipe.smembers(k.failed)
        meta, done, failed = pipe.execute()
        if not meta:
            return None
        try:
            steps = json.loads(meta.get("steps") or "[]")
        except (ValueError, RecursionError):
            steps = []
        return WorkflowState(workflow_id, dict(meta), {int(s) for s in done}, {int(s) for s in failed}, steps)

    def task_hashes(self, wanted: Sequence[tuple[str, str]], queues: Sequence[str]) -> list[tuple[str, dict[str, str]] | None]:
        """``Broker.get_task`` of many ``(task id, queue)`` in one round trip: each looked up in its queue first, then
        in ``queues`` (a step replayed into another queue), in every partition."""
        order = [self.broker.options.physical_all([q, *(x for x in queues if x != q)]) for _, q in wanted]
        pipe = self.broker.client.pipeline(transaction=False)
        for (task_id, _), qs in zip(wanted, order, strict=True):
            for key in self.broker.task_hashes(task_id, qs):
                pipe.hgetall(key)
        replies = pipe.execute()
        out, at = [], 0
        for qs in order:
            out.append(self.broker.found_task(qs, replies[at:at + len(qs)]))
            at += len(qs)
        return out

    def spec(self, workflow_id: str, step: int) -> StepSpec | None:
        found = self.broker.client.hget(self.keys(workflow_id).spec, str(step))
        return StepSpec.parse(found) if found else None

    def _header(self, k: WorkflowKeys, pipe: Any) -> None:
        pipe.hmget(k.meta, list(HEADER_FIELDS))
        pipe.scard(k.done)
        pipe.smembers(k.failed)

    @staticmethod
    def _made_header(workflow_id: str, meta: list[Any], done: int, failed: set[str]) -> WorkflowHeader | None:
        found = {name: str(v) for name, v in zip(HEADER_FIELDS, meta, strict=True) if v is not None}
        if "status" not in found:
            return None
        return WorkflowHeader(workflow_id, found, int(found.get("total") or 0), int(done), {int(x) for x in failed})

    def newest(self, start: int, count: int) -> tuple[int, list[tuple[str, WorkflowHeader | None]]]:
        """How many workflows the list holds, and ``count`` of them from the ``start``-th newest with their headers
        (``None``: its keys expired): two round trips, O(count + their failed steps)."""
        index = WorkflowKeys.index(self.broker.options.key_prefix)
        pipe = self.broker.client.pipeline(transaction=False)
        pipe.zcard(index)
        pipe.zrevrange(index, start, start + count - 1)
        total, ids = pipe.execute()
        pipe = self.broker.client.pipeline(transaction=False)
        for workflow_id in ids:
            self._header(self.keys(workflow_id), pipe)
        replies = pipe.execute()
        return int(total), [(i, self._made_header(i, *replies[3 * n:3 * n + 3])) for n, i in enumerate(ids)]

    def header(self, workflow_id: str) -> WorkflowHeader | None:
        """The workflow's status, counts and failed steps without its steps' list: one round trip, O(failed steps)."""
        pipe = self.broker.client.pipeline(transaction=False)
        self._header(self.keys(workflow_id), pipe)
        return self._made_header(workflow_id, *pipe.execute())

    def step_record(self, workflow_id: str, step: int) -> tuple[WorkflowHeader, StepSpec | None, bool] | None:
        """``header``, the step's stored spec (None for a first step: it was queued at creation) and whether it is
        done, in one round trip: what a result of one step not queued yet needs, whatever the workflow's size."""
        k = self.keys(workflow_id)
        pipe = self.broker.client.pipeline(transaction=False)
        self._header(k, pipe)
        pipe.hget(k.spec, str(step))
        pipe.sismember(k.done, str(step))
        meta, done, failed, spec, is_done = pipe.execute()
        header = self._made_header(workflow_id, meta, done, failed)
        if header is None:
            return None
        return header, (StepSpec.parse(spec) if spec else None), bool(is_done)

    def summary(self, workflow_id: str) -> list[dict[str, Any]]:
        """Every step as written (task path, queue, parents; ``id`` of a depends_on parent): one field, O(steps) bytes,
        fixed at creation (a reader keeps it)."""
        found = self.broker.client.hget(self.keys(workflow_id).meta, "steps")
        try:
            steps = json.loads(found) if found else []
        except (ValueError, RecursionError):
            steps = []
        return steps if isinstance(steps, list) else []

    def done_among(self, workflow_id: str, steps: Sequence[int]) -> set[int]:
        """Which of ``steps`` are done (SMISMEMBER: O(len(steps)))."""
        if not steps:
            return set()
        found = self.broker.client.smismember(self.keys(workflow_id).done, [str(s) for s in steps])
        return {s for s, yes in zip(steps, found, strict=True) if yes}

    def task_states(self, ids: Sequence[str], queues: Sequence[str]) -> list[tuple[str, str]]:
        """The ``(queue, stored state)`` of each task id, looked up in every queue (one HGET each, one round trip);
        ``("", "")`` for none."""
        physical = self.broker.options.physical_all(list(queues))
        pipe = self.broker.client.pipeline(transaction=False)
        for task_id in ids:
            for key in self.broker.task_hashes(task_id, physical):
                pipe.hget(key, "state")
        replies = pipe.execute()
        n = len(physical)
        return [next(((q, str(x)) for q, x in zip(physical, replies[i * n:(i + 1) * n], strict=True) if x), ("", ""))
                for i in range(len(ids))]
