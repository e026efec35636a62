"""Workflow vocabulary: signatures, ``chain``, ``group``, ``chord``, and the graph they compile to.

No I/O here: this module turns what a user writes into a list of ``Step``s
(each an ordinary task call with a deterministic id, its parents and how it
takes their results) that ``workflows/enqueue.py`` stores and the worker releases.
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from django_redisq.workflows.spec import StepSpec

if TYPE_CHECKING:
    from django_redisq.task import RedisTask


class InvalidWorkflow(TypeError, ValueError):
    """A workflow that cannot be built (a part that is not a signature, too many steps), said at enqueue."""


MARKER = "_workflow"
"""The reserved metadata key (core/metadata.py: ``_`` keys belong to the backend) naming a step's ``[[workflow, step], ...]``."""
MAX_STEPS = 100_000
"""Most steps one workflow may have: its bookkeeping lives in one Redis hash-tag slot."""
MAX_DEPTH = 100
"""Most levels of nesting of different kinds (a chain in a group in a chain ...) one workflow may have.

A chain directly in a chain, or a group directly in a group, adds no level: it is the same as its parts
written inline (``chain(chain(a, b), c)`` is ``chain(a, b, c)``), so a chain built by nesting one step at a
time may be as long as ``MAX_STEPS``. Compiling walks one Python frame per level: the limit keeps a deep
canvas a clear ``InvalidWorkflow`` at enqueue instead of a ``RecursionError``."""

Node = Union["Signature", "Chain", "Group", "Chord"]


@dataclass(frozen=True, slots=True)
class Signature:
    """One task call, not yet enqueued: ``task.s(*args, **kwargs)`` (``immutable``: ``task.si(...)``)."""

    task: RedisTask[Any, Any]
    """The task called (task.py builds signatures with ``.s()`` / ``.si()``; a type-only import: task.py imports this module)."""
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
        """Store the workflow and queue its first steps; returns a ``WorkflowResult`` (workflows/enqueue.py).

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
        return _leaves(self)


class Group(_Canvas):
    """Members run in parallel; what follows gets the list of their results, in member order."""

    def __init__(self, members: Iterable[Any]) -> None:
        self.members = tuple(_node(m) for m in members)

    def signatures(self) -> list[Signature]:
        return _leaves(self)


class Chord(_Canvas):
    """A group, then one callback with the list of the members' results, in member order."""

    def __init__(self, members: Iterable[Any], callback: Any) -> None:
        self.group = Group(members)
        self.callback = _node(callback)

    def signatures(self) -> list[Signature]:
        return _leaves(self)


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


def _parts(node: Node) -> list[Node]:
    """The direct parts of ``node``, with a chain in a chain (a group in a group) written inline, without recursion."""
    if isinstance(node, Signature):
        return []
    if isinstance(node, Chord):
        return [node.group, node.callback]
    kind = type(node)
    out: list[Node] = []
    stack = [iter(node.parts if isinstance(node, Chain) else node.members)]
    while stack:
        for part in stack[-1]:
            if type(part) is kind:
                stack.append(iter(part.parts if isinstance(part, Chain) else part.members))  # type: ignore[union-attr]
                break
            out.append(part)
        else:
            stack.pop()
    return out


def _leaves(node: Node) -> list[Signature]:
    """Every signature of ``node`` in the order written, without recursion (any depth)."""
    out: list[Signature] = []
    stack: list[Node] = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Signature):
            out.append(n)
        else:
            stack.extend(reversed(_parts(n)))
    return out


def check_depth(node: Node) -> None:
    """``InvalidWorkflow`` for a canvas nested deeper than ``MAX_DEPTH`` levels (walked without recursion)."""
    stack: list[tuple[Node, int]] = [(node, 1)]
    while stack:
        n, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidWorkflow(f"a workflow may nest at most {MAX_DEPTH} levels of chain, group and chord (MAX_DEPTH), "
                                  f"this one nests deeper: write nested chains (or groups) as one, or split the workflow.")
        stack.extend((p, depth + 1) for p in _parts(n))


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
            for part in _parts(n):
                parents, mode = walk(part, parents, mode)
            return parents, mode
        if isinstance(n, Group):
            exits: list[int] = []
            for m in _parts(n):
                exits += walk(m, parents, mode)[0]
            return exits, "list"
        ends, _ = walk(n.group, parents, mode)
        return walk(n.callback, ends, "list")

    check_depth(node)  # before the walk, which recurses once per level
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
        except (ValueError, RecursionError):
            continue
        if from_message:
            data = data.get("m") if isinstance(data, dict) else None
        found = data.get(MARKER) if isinstance(data, dict) else None
        if isinstance(found, list):
            return [(str(p[0]), int(p[1])) for p in found
                    if isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], int)]
    return []


def release_call(spec: StepSpec | Mapping[str, Any], inputs: Sequence[Any]) -> tuple[list[Any], dict[str, Any], int]:
    """The arguments of a released step, from its spec (workflows/spec.py) and its parents' results (in parent order),
    and its delay in ms (its ``run_after``, measured from now): ``StepSpec.call``, kept for the path ``flow`` documented."""
    return (spec if isinstance(spec, StepSpec) else StepSpec.from_stored(spec)).call(inputs)
