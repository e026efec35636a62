"""Fault injection into the worker's store: make a chosen step of fetch, settle, workflow release or the event pump raise.

A ``FaultPlan`` is a list of ``Rule``: which step (``TARGETS``: a method of the broker, the workflow store, the
topics store or the runner), which exception (``EXCEPTIONS``: transient and non-transient Redis errors, an encoding
error, ``RecursionError``, a plain bug), and when: on the n-th call (and ``times`` calls from it), or with a
probability from the plan's seeded random, at most ``limit`` times. ``after=True`` lets the real step land first and
then raises (a reply lost on the way back). ``injecting(plan)`` patches the classes for its block; only calls made
on a worker's threads (named ``redisq-*``) are touched, so the test's own enqueues and reads go through untouched.

The patch is on the classes, not on one instance, so it reaches every store a worker builds (its broker, the
heartbeat's, the workflow hooks', the pump's), whatever the wiring inside the worker.
"""

from __future__ import annotations

import functools
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import redis

from django_redisq.store.broker import Broker
from django_redisq.store.topics import Topics
from django_redisq.store.workflows import WorkflowStore
from django_redisq.worker.running.runner import Runner
from django_redisq.workflows.engine import WorkflowEngine

TARGETS: dict[str, tuple[type, str]] = {
    **{f"broker.{m}": (Broker, m) for m in ("fetch", "wait", "ack_many", "retry", "bury", "save_metadata_held",
                                            "enqueue", "release", "processing_ids")},
    **{f"workflows.{m}": (WorkflowStore, m) for m in ("done", "fail", "status")},
    **{f"workflows.{m}": (WorkflowEngine, m) for m in ("release", "enqueue_step")},  # the engine's (workflows/engine.py)
    **{f"topics.{m}": (Topics, m) for m in ("read", "ack", "claim", "bury", "wait")},
    "runner.run": (Runner, "run"),
}
"""Steps a rule may name: ``<store>.<method>``."""


def _unicode() -> BaseException:
    return UnicodeEncodeError("utf-8", "a\ud800b", 1, 2, "surrogates not allowed (injected)")


EXCEPTIONS: dict[str, Callable[[], BaseException]] = {
    "connection": lambda: redis.ConnectionError("injected: connection lost"),
    "timeout": lambda: redis.TimeoutError("injected: timeout reading from socket"),
    "response": lambda: redis.ResponseError("ERR injected: Error running script (user_script:1): bad reply"),
    "unicode": _unicode,
    "recursion": lambda: RecursionError("injected: maximum recursion depth exceeded while decoding a JSON array"),
    "bug": lambda: RuntimeError("injected: a plain bug"),
    "keyerror": lambda: KeyError("injected"),
}
"""Exceptions a rule may raise, by name: ``connection`` and ``timeout`` are transient (store/server.py
``is_transient``), the others would repeat."""
TRANSIENT = ("connection", "timeout")


@dataclass
class Rule:
    """Raise ``exc`` from ``target`` on its ``nth`` call (and the ``times - 1`` after it), or with ``probability``."""

    target: str
    exc: str
    nth: int = 0
    times: int = 1
    probability: float = 0.0
    limit: int = 1_000_000
    after: bool = False
    threads: str = "redisq-"
    """Only calls on threads whose name starts with this (``redisq-events`` for the pump alone)."""

    def __post_init__(self) -> None:
        if self.target not in TARGETS or self.exc not in EXCEPTIONS:
            raise ValueError(f"unknown target {self.target!r} or exception {self.exc!r}")


@dataclass
class FaultPlan:
    """Rules and the seeded random that fires the probable ones; counts calls and faults per target."""

    rules: list[Rule]
    seed: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    fired: Counter[int] = field(default_factory=Counter)  # rule index -> times it raised
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def choose(self, target: str) -> Rule | None:
        """The rule that fires for this call of ``target`` on this thread, if any (counted)."""
        name = threading.current_thread().name
        with self.lock:
            n = self.calls[target] = self.calls[target] + 1
            for i, rule in enumerate(self.rules):
                if rule.target != target or not name.startswith(rule.threads) or self.fired[i] >= rule.limit:
                    continue
                hit = rule.nth <= n < rule.nth + rule.times if rule.nth else self.rng.random() < rule.probability
                if hit:
                    self.fired[i] += 1
                    self.injected[target] += 1
                    return rule
        return None

    def silent(self) -> list[Rule]:
        """Rules that never raised: the workload never reached them (a harness that injects nothing proves nothing)."""
        return [r for i, r in enumerate(self.rules) if not self.fired[i]]


def _wrapped(plan: FaultPlan, target: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def step(*args: Any, **kwargs: Any) -> Any:
        if not threading.current_thread().name.startswith("redisq-"):
            return original(*args, **kwargs)
        rule = plan.choose(target)
        if rule is None:
            return original(*args, **kwargs)
        if rule.after:
            original(*args, **kwargs)
        raise EXCEPTIONS[rule.exc]()

    return step


@contextmanager
def injecting(plan: FaultPlan) -> Iterator[FaultPlan]:
    """Patch every target a rule of ``plan`` names for the block; the originals are back after it."""
    saved: list[tuple[type, str, Any]] = []  # (class, name, its own attribute or None when it inherits it)
    try:
        for target in sorted({r.target for r in plan.rules}):
            cls, name = TARGETS[target]
            saved.append((cls, name, cls.__dict__.get(name)))
            setattr(cls, name, _wrapped(plan, target, getattr(cls, name)))
        yield plan
    finally:
        for cls, name, own in reversed(saved):
            if own is None:
                delattr(cls, name)
            else:
                setattr(cls, name, own)
