"""A durable task's Redis steps (``broker.durable``): its recorded steps, sleeps and waits, one script each.

The records are fields ``step:<name>`` of the task hash (store/keys.py), not a key of their
own: they share the task's slot, its ``RESULT_TTL`` after the ack (ack.lua writes a plain
task's hash without reading it, and so leaves them), its dead letter (a replay resumes after
the last one) and its purge, and no new key needs a bound of its own (invariant 10).
``step_record.lua`` writes a name once: what runs exactly once is the recording.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django_redisq.exceptions import LeaseLost, TaskNotFound
from django_redisq.store.scripts.runner import ScriptRunner

FIELD = "step:"
"""The task hash's fields of recorded steps: ``step:<name>``."""

SCHEDULED, READY, CANCELLED, CORRUPT = 1, 2, 3, 4
"""suspend.lua's answers."""


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One recorded step as stored (step_record.lua's JSON), for the journal and the operators' pages."""

    name: str
    index: int
    kind: str  # "step", "sleep" or "wait"
    at: int  # Redis ms it was recorded (a wait: when it began)
    took: int  # ms the callable ran (a wait: until its event came)
    value_json: str  # the result as JSON ("null" for a sleep, the event's payload for a wait)
    due: int = 0  # a sleep's or a wait's due time (Redis ms)
    state: str = "done"  # "waiting": a wait no event has matched yet
    event: str = ""  # the entry id of the event that woke a wait

    @classmethod
    def parse(cls, field: str, raw: Any) -> StepRecord:
        rec = json.loads(_text(raw))
        return cls(field.removeprefix(FIELD), int(rec["i"]), str(rec["k"]), int(rec["at"]), int(rec.get("took") or 0),
                   str(rec.get("v", "null")), int(rec.get("due") or 0), str(rec.get("st", "done")), str(rec.get("ev") or ""))

    @property
    def size(self) -> int:
        """The result's size in bytes, as stored."""
        return len(self.value_json.encode("utf-8", "surrogateescape"))


@dataclass(frozen=True, slots=True)
class Recorded:
    """What ``step_record.lua`` answered: the record that stands (ours or an earlier one) and the Redis time."""

    record: StepRecord
    new: bool
    now: int


def records_of(fields: dict[str, Any]) -> list[StepRecord]:
    """The step records among a task hash's fields, in the order they ran; unreadable ones left out."""
    out = []
    for name, raw in fields.items():
        if name.startswith(FIELD):
            try:
                out.append(StepRecord.parse(name, raw))
            except (ValueError, KeyError, TypeError):
                continue
    return sorted(out, key=lambda rec: rec.index)


class DurableSteps:
    """Record, read and clear the steps of durable tasks; settle a sleeping or waiting one."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner

    def load(self, queue: str, task_id: str) -> tuple[int, dict[str, StepRecord]]:
        """The Redis time and the task's records by name; ``TaskNotFound`` if the task is gone."""
        reply = self.runner.run("step_load", keys=[self.runner.keys(queue).task(task_id)], args=[])
        if not int(reply[1]):
            raise TaskNotFound(f"task {task_id} is gone: its steps cannot be read")
        rows = {_text(reply[i]): reply[i + 1] for i in range(2, len(reply) - 1, 2)}
        return int(reply[0]), {rec.name: rec for rec in records_of(rows)}

    def record(self, queue: str, task_id: str, name: str, index: int, kind: str, *, took_ms: int = 0,
               value_json: str = "null", due: tuple[str, int] = ("", 0)) -> Recorded:
        """Record a step unless one of that name stands; ``due``: ``("in", ms)`` or ``("at", epoch ms)``."""
        reply = self.runner.run("step_record", keys=[self.runner.keys(queue).task(task_id)],
                                args=[FIELD + name, index, kind, took_ms, value_json, due[0], due[1]])
        if int(reply[0]) == -1:
            raise TaskNotFound(f"task {task_id} is gone: step {name!r} cannot be recorded")
        return Recorded(StepRecord.parse(FIELD + name, reply[1]), int(reply[0]) == 1, int(reply[2]))

    def clear(self, queue: str, task_id: str, name: str) -> bool:
        """Forget one recorded step so the next run calls it again; False if there was none."""
        code = int(self.runner.run("step_clear", keys=[self.runner.keys(queue).task(task_id)], args=[FIELD + name]))
        if code == -1:
            raise TaskNotFound(f"no task {task_id} in queue {queue}")
        if code == -2:
            raise ValueError(f"task {task_id} is running: clear its step once the attempt has ended")
        return code == 1

    def suspend(self, queue: str, worker: str, task_id: str, name: str, aside_ms: int) -> int:
        """Settle an attempt that ended in a sleep or a wait (suspend.lua); its answer (``SCHEDULED``, ``READY``, ...)."""
        k = self.runner.keys(queue)
        code = int(self.runner.run("suspend", keys=[
            k.processing(worker), k.scheduled, k.task(task_id), k.status(task_id), k.dead, k.cancels,
            k.pending, k.prioritized, k.prioseq, k.slots, k.blocked,
        ], args=[k.prefix, task_id, worker, FIELD + name, aside_ms]))
        if code == -1:
            raise LeaseLost(f"task {task_id} was no longer held by worker {worker} at its suspension")
        return code

    def wake(self, queue: str, task_id: str, name: str, payload_json: str, entry_id: str) -> int:
        """Record an event as a wait's result and make its task ready: 1 woken, 2 recorded, 0 nothing (wait_wake.lua)."""
        k = self.runner.keys(queue)
        return int(self.runner.run("wait_wake", keys=[k.task(task_id), k.scheduled, k.pending, k.prioritized, k.prioseq],
                                   args=[task_id, FIELD + name, payload_json, entry_id]))
