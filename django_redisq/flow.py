"""Workflow vocabulary: signatures, ``chain``, ``group``, ``chord``, and the graph they compile to.

No I/O here: this module turns what a user writes into a list of ``Step``s
(each an ordinary task call with a deterministic id, its parents and how it
takes their results) that ``workflows.py`` stores and the worker releases.
Keeping it pure lets the enqueuer, the worker and the tests share one meaning.

How results flow (Celery's canvas, where each idea comes from):

- a step after a single step gets that step's return value as its first
  argument (``chain(a.s(), b.s())``: ``b(a())``);
- a step after a group gets the list of the group's results, in member order
  (a group followed by a step is a chord);
- ``.si()`` (immutable) takes nothing from its parents: it only waits for them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Union


class InvalidWorkflow(TypeError, ValueError):
    """A workflow that cannot be built (a part that is not a signature, too many steps), said at enqueue."""


MARKER = "_workflow"
"""The reserved metadata key (metadata.py: ``_`` keys belong to the backend) naming a step's ``[[workflow, step], ...]``."""
MAX_STEPS = 100_000
"""Most steps one workflow may have: its bookkeeping lives in one Redis hash-tag slot."""

Node = Union["Signature", "Chain", "Group", "Chord"]


@dataclass(frozen=True, slots=True)
class Signature:
    """One task call, not yet enqueued: ``task.s(*args, **kwargs)`` (``immutable``: ``task.si(...)``)."""

    task: Any  # a RedisTask (task.py builds signatures; this module sits below it and imports nothing of the package)
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    immutable: bool = False

    def enqueue(self) -> Any:
        """A one-step workflow (rarely useful; ``task.enqueue`` is the plain way)."""
        return Chain((self,)).enqueue()


class _Canvas:
    """What ``chain``, ``group`` and ``chord`` share: enqueue through the first task's backend."""

    def signatures(self) -> list[Signature]:
        raise NotImplementedError

    def enqueue(self, *, on_error: Signature | None = None) -> Any:
        """Store the workflow and queue its first steps; returns a ``WorkflowResult`` (workflows.py).

        ``on_error``: a signature run once if a step fails for good (Celery's ``link_error``);
        it gets the workflow id and the failed step's task id as arguments, after its own.
        """
        sigs = self.signatures()
        if not sigs:
            raise InvalidWorkflow("a workflow needs at least one task signature.")
        backend = sigs[0].task.get_backend()
        enqueue = getattr(backend, "enqueue_workflow", None)
        if enqueue is None:
            raise InvalidWorkflow(f"the backend of {sigs[0].task.module_path} cannot run workflows (not django_redisq's).")
        return enqueue(self, on_error)

    def delay(self) -> Any:
        return self.enqueue()


def _node(value: Any) -> Node:
    if isinstance(value, (Signature, Chain, Group, Chord)):
        return value
    raise InvalidWorkflow(f"a workflow part must be task.s(...), task.si(...), chain, group or chord, got {value!r}.")


class Chain(_Canvas):
    """Parts run one after the other; each gets the previous part's result (``chain(a.s(), b.s())``)."""

    def __init__(self, parts: Iterable[Any]) -> None:
        self.parts = tuple(_node(p) for p in parts)

    def signatures(self) -> list[Signature]:
        return [s for p in self.parts for s in _sigs(p)]


class Group(_Canvas):
    """Members run in parallel; what follows gets the list of their results, in member order."""

    def __init__(self, members: Iterable[Any]) -> None:
        self.members = tuple(_node(m) for m in members)

    def signatures(self) -> list[Signature]:
        return [s for m in self.members for s in _sigs(m)]


class Chord(_Canvas):
    """A group, then one callback with the list of the members' results, in member order."""

    def __init__(self, members: Iterable[Any], callback: Any) -> None:
        self.group = Group(members)
        self.callback = _node(callback)

    def signatures(self) -> list[Signature]:
        return self.group.signatures() + _sigs(self.callback)


def chain(*parts: Any) -> Chain:
    """``chain(a.s(1), b.s(), c.si())``; a single iterable works too."""
    if len(parts) == 1 and not isinstance(parts[0], (Signature, Chain, Group, Chord)):
        parts = tuple(parts[0])
    return Chain(parts)


def group(*members: Any) -> Group:
    """``group(a.s(1), a.s(2))`` or ``group(a.s(i) for i in ...)``."""
    if len(members) == 1 and not isinstance(members[0], (Signature, Chain, Group, Chord)):
        members = tuple(members[0])
    return Group(members)


def chord(members: Iterable[Any], callback: Any) -> Chord:
    return Chord(members, callback)


def _sigs(node: Node) -> list[Signature]:
    return [node] if isinstance(node, Signature) else node.signatures()


@dataclass(slots=True)
class Step:
    """One step of a compiled workflow: a task call and where its inputs come from."""

    index: int
    sig: Signature
    parents: list[int] = field(default_factory=list)
    mode: str = "none"  # how it takes its parents' results: "one" (the value), "list" (in parent order), "none"
    children: list[int] = field(default_factory=list)


def compile_flow(node: Node) -> list[Step]:
    """The steps of ``node`` in the order written (a chord's callback after its members), with their edges."""
    steps: list[Step] = []

    def walk(n: Node, parents: list[int], mode: str) -> tuple[list[int], str]:
        """Add ``n`` after ``parents``; returns its exit steps and how a follower takes them."""
        if isinstance(n, Signature):
            step = Step(len(steps), n, list(parents), "none" if n.immutable or not parents else mode)
            steps.append(step)
            for p in parents:
                steps[p].children.append(step.index)
            return [step.index], "one"
        if isinstance(n, Chain):
            if not n.parts:
                return parents, mode
            for part in n.parts:
                parents, mode = walk(part, parents, mode)
            return parents, mode
        if isinstance(n, Group):
            exits: list[int] = []
            for m in n.members:
                exits += walk(m, parents, mode)[0]
            return exits, "list"
        ends, _ = walk(n.group, parents, mode)
        return walk(n.callback, ends, "list")

    walk(node, [], "none")
    if len(steps) > MAX_STEPS:
        raise InvalidWorkflow(f"a workflow may have at most {MAX_STEPS} steps, this one has {len(steps)}.")
    return steps


def step_id(workflow_id: str, index: int) -> str:
    """The deterministic task id of a step: known at creation, so a release is idempotent by id."""
    return f"{workflow_id}.{index}"


def error_id(workflow_id: str) -> str:
    """The task id of the workflow's ``on_error`` callback: it runs once, whoever releases it."""
    return f"{workflow_id}.e"


def parse_step_id(task_id: str) -> tuple[str, int] | None:
    wf, _, n = task_id.rpartition(".")
    return (wf, int(n)) if wf and n.isdigit() else None


def markers(raw_message: str, saved_metadata: str) -> list[tuple[str, int]]:
    """The ``(workflow, step)`` pairs a delivered task belongs to, from its saved metadata or its message.

    A cheap substring test first: a task of no workflow pays no JSON decoding.
    """
    for text, from_message in ((saved_metadata, False), (raw_message, True)):
        if not text or MARKER not in text:
            continue
        try:
            data = json.loads(text)
        except ValueError:
            continue
        if from_message:
            data = data.get("m") if isinstance(data, dict) else None
        found = data.get(MARKER) if isinstance(data, dict) else None
        if isinstance(found, list):
            return [(str(p[0]), int(p[1])) for p in found
                    if isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], int)]
    return []


def release_call(spec: dict[str, Any], inputs: Sequence[Any]) -> tuple[list[Any], dict[str, Any], int]:
    """The arguments of a released step, from its stored spec and its parents' results (in parent order),
    and its delay in ms (its ``run_after``, measured from now)."""
    args = list(spec.get("a") or [])
    mode = spec.get("mode", "none")
    if mode == "one":
        args = [inputs[0] if inputs else None, *args]
    elif mode == "list":
        args = [list(inputs), *args]
    at = spec.get("at")
    delay = max(0, int(at - time.time() * 1000)) if isinstance(at, (int, float)) else 0
    return args, dict(spec.get("k") or {}), delay
