"""What a workflow's steps hand back and what its reads find: named, so no caller reads a reply by position."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from django_redisq.workflows.spec import StepSpec


@dataclass(frozen=True, slots=True)
class Released:
    """A step whose parents are all done: its index, stored spec and the parents' results (in parent order)."""

    step: int
    spec: StepSpec
    inputs: list[Any]


@dataclass(frozen=True, slots=True)
class DoneReply:
    status: str  # gone, cancelled, running, failed, succeeded, or ended (this call completed the workflow)
    released: list[Released] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WorkflowState:
    """What a read of one workflow's keys found (``None`` from ``read`` when it is gone)."""

    id: str
    meta: dict[str, str]
    done: set[int]
    failed: set[int]
    steps: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class WorkflowHeader:
    """A bounded read of one workflow: its meta without the steps' list, how many steps are done, the failed ones."""

    id: str
    meta: dict[str, str]
    total: int
    done: int
    failed: set[int]


HEADER_FIELDS = ("status", "total", "error", "failed_step", "cancelled_by", "created_at", "finished_at")
"""The meta fields a bounded read returns (never ``steps``, the JSON list of every step, O(steps) bytes)."""


class Failed(NamedTuple):
    """wf_fail.lua's answer: the workflow's status, the on_error spec to queue (idempotently, by its fixed id) and
    whether this call failed the workflow."""

    status: str
    on_error: StepSpec | None
    first: bool


class Adopted(NamedTuple):
    """What marking an earlier task as a workflow's step found: ``missing``, ``finished``, ``dead`` or the state it
    was marked in (``changed``: its metadata kept changing), and its result JSON if it has finished already."""

    found: str
    result: str
