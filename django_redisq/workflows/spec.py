"""A workflow step as stored: ``StepSpec``, and its stored form (docs/reference/wire-protocol.md, "Workflows").

A step that waits for its parents is queued later, by whichever process
settles its last parent (worker/flows.py, or ``repair``): everything that
process needs to build the step's message is written at creation, as one JSON
object per step in ``W:spec`` (and the ``on_error`` callback's in ``W:meta``).
This class is the one place that writes and reads that object; wf_done.lua
reads two of its keys (``mode``, ``p``) to gather the parents' results.

The keys are short and their order fixed: the bytes are what a worker of the
release before reads during a rolling deploy, so a change here is a change of
the wire protocol.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

MODES = ("none", "one", "list")
"""How a step takes its parents' results: not at all, the one parent's value first, or their list first."""


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One step's call, checked at creation and stored until its parents are done."""

    task: str
    """``t``: the task's dotted path (a registered task; the worker never imports it from here)."""
    queue: str = "default"
    """``q``: the logical queue it is queued in."""
    args: list[Any] = field(default_factory=list)
    """``a``: its own positional arguments, JSON-encoded already (core/message.py); parents' results go first."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """``k``: its keyword arguments, JSON-encoded already."""
    overrides: dict[str, Any] = field(default_factory=dict)
    """``o``: what ``task.using(...)`` changed (core/message.py ``OVERRIDES``), carried in its message's ``o``."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """``m``: its message's metadata: the task's own, ``_workflow`` and ``_trace`` (core/tracing.py)."""
    priority: int = 0
    """``pr``: its priority (higher first)."""
    run_at: int | None = None
    """``at``: its ``run_after`` in ms since the epoch, or None: released steps wait until then."""
    idempotency_key: str = ""
    """``i``: its idempotency key ('' for none)."""
    limits: str = ""
    """``l``: its concurrency and rate limits as the store takes them (core/limits.py), '' for none."""
    mode: str = "none"
    """``mode``: how it takes its parents' results (``MODES``); read by wf_done.lua."""
    parents: list[int] = field(default_factory=list)
    """``p``: its parents' step indexes, in the order their results are passed; read by wf_done.lua."""

    def stored(self) -> dict[str, Any]:
        """The stored object, keys in the order every release wrote them."""
        return {"t": self.task, "q": self.queue, "a": self.args, "k": self.kwargs, "o": self.overrides, "m": self.metadata,
                "pr": self.priority, "at": self.run_at, "i": self.idempotency_key, "l": self.limits,
                "mode": self.mode, "p": self.parents}

    def dumps(self) -> str:
        """The stored form: compact JSON (what wf_create.lua writes to ``W:spec`` / ``on_error``)."""
        return json.dumps(self.stored(), separators=(",", ":"))

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> StepSpec:
        """A spec from its stored object; a missing key takes its default (the reader is lenient, as the writer is fixed)."""
        at = data.get("at")
        return cls(task=str(data.get("t") or ""), queue=str(data.get("q") or "default"), args=list(data.get("a") or []),
                   kwargs=dict(data.get("k") or {}), overrides=dict(data.get("o") or {}), metadata=dict(data.get("m") or {}),
                   priority=int(data.get("pr") or 0), run_at=int(at) if isinstance(at, (int, float)) else None,
                   idempotency_key=str(data.get("i") or ""), limits=str(data.get("l") or ""),
                   mode=str(data.get("mode") or "none"), parents=[int(p) for p in data.get("p") or []])

    @classmethod
    def parse(cls, text: str | bytes) -> StepSpec:
        """A spec from its stored JSON text (what ``dumps`` wrote)."""
        return cls.from_stored(json.loads(text))

    def call(self, inputs: Sequence[Any], now_ms: float | None = None) -> tuple[list[Any], dict[str, Any], int]:
        """The arguments of the released step from its parents' results (in parent order), and its delay in ms
        (its ``run_after`` measured from ``now_ms``, by default this process's clock)."""
        args = list(self.args)
        if self.mode == "one":
            args = [inputs[0] if inputs else None, *args]
        elif self.mode == "list":
            args = [list(inputs), *args]
        now = time.time() * 1000 if now_ms is None else now_ms
        delay = max(0, int(self.run_at - now)) if self.run_at is not None else 0
        return args, dict(self.kwargs), delay

    def fan_in(self) -> int:
        """How many parents' results its message carries: all for ``list``, the first for ``one``, none otherwise."""
        return len(self.parents) if self.mode == "list" else (1 if self.mode == "one" and self.parents else 0)
