"""One settle step against Redis, and what became of it: one result type, never an exception.

Every Redis call the settler and its hooks make to settle a task (an ack, a
retry, a burial, a workflow's bookkeeping, a metadata save) goes through
``SettleSteps.run``, which applies one policy:

- a transient Redis error (connection lost, memory full, a failover, a busy
  script) is retried with backoff until the step lands, unless a force stop
  comes meanwhile (``STOPPED``: the exit's release hands the task back, counted);
- ``LeaseLost``: another worker has the task now and settles it (``LOST``);
- anything else (a script error, a value Redis refuses, a bug) would fail the
  same way again: tried ``SETTLE_TRIES`` times in case it was a passing one,
  then ``FAILED``, and the settler dead-letters the task (``settle_failed``).

The answer is a ``StepResult``; no caller tells a value from a sentinel or
catches an exception to learn what happened.
"""

from __future__ import annotations

import enum
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from django_redisq.exceptions import LeaseLost, RedisError
from django_redisq.store.server import is_transient
from django_redisq.worker.observability.outage import Outage

logger = logging.getLogger("django_redisq")

T = TypeVar("T")

SETTLE_TRIES = 3
"""Tries of a settle step that fails with anything but a transient Redis error, before its task is dead-lettered."""


class SettleFailed(Exception):
    """A settle step that would fail the same way again: a bug, data Redis holds that a script cannot read, or a value
    Redis will always refuse. Retrying it, or handing the task back to run again, would loop for ever, so the task
    it was for is dead-lettered instead (reason ``settle_failed``), with ``cause`` as its error."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(f"{what} failed: {type(cause).__name__}: {cause}")
        self.what, self.cause = what, cause


class Landing(enum.Enum):
    """How a settle step ended."""

    LANDED = "landed"  # Redis took it; ``StepResult.value`` is its answer
    LOST = "lost"  # LeaseLost: the task was handed to another worker meanwhile, which settles it
    STOPPED = "stopped"  # a force stop came while Redis said "not now": the exit's release hands it back, counted
    FAILED = "failed"  # it would fail again (``StepResult.failure``): its task is dead-lettered, settle_failed


@dataclass(frozen=True, slots=True)
class StepResult(Generic[T]):
    """What became of one settle step: landed with a value, missed for now (lost, stopped), or failed for good."""

    landing: Landing
    value: T | None = None
    failure: SettleFailed | None = None

    @property
    def landed(self) -> bool:
        return self.landing is Landing.LANDED

    @property
    def failed(self) -> bool:
        return self.landing is Landing.FAILED

    @classmethod
    def ok(cls, value: T | None = None) -> StepResult[T]:
        return cls(Landing.LANDED, value)

    @classmethod
    def broken(cls, what: str, cause: BaseException) -> StepResult[T]:
        """A failure for good; ``cause`` is kept as the dead letter's error."""
        failure = cause if isinstance(cause, SettleFailed) else SettleFailed(what, cause)
        return cls(Landing.FAILED, failure=failure)


LANDED: StepResult[None] = StepResult.ok()
"""A step with nothing to answer that landed (or had nothing to do)."""


class StepRunner(Protocol):
    """Runs one settle step under the settle policy (``SettleSteps``; a test may give its own)."""

    def run(self, step: Callable[[], T], what: str) -> StepResult[T]: ...


class SettleSteps:
    """The settle policy: retry while Redis says "not now", give up on an answer that would repeat."""

    def __init__(self, force: threading.Event, sleep: Callable[[float], None] = time.sleep, outage: Outage | None = None) -> None:
        """``force``: set by a force stop, which ends a wait for Redis; ``sleep``: the backoff's clock; ``outage``: the
        worker's account of Redis out of reach (a step retried through one is said once)."""
        self.force = force
        self.sleep = sleep
        self.outage = outage or Outage("settler")

    def run(self, step: Callable[[], T], what: str) -> StepResult[T]:
        """Run ``step`` until it lands or is missed; ``what`` names it in the log and in a ``SettleFailed``."""
        failures = 0
        for attempt in itertools.count():
            try:
                return StepResult.ok(step())
            except LeaseLost as exc:
                logger.warning("%s; another worker has it now", exc)
                return StepResult(Landing.LOST)
            except Exception as exc:  # noqa: BLE001 - every failure is an answer here: retried, or FAILED with it
                if not (isinstance(exc, RedisError) and is_transient(exc)):
                    # an answer that would repeat (a script bug, a value Redis refuses, bad data): tried a few times
                    # only, in case it was a passing one, then the task ends in the dead letters
                    failures += 1
                    if failures >= SETTLE_TRIES:
                        return StepResult.broken(what, exc)
                    logger.warning("%s failed (%s: %s); trying again", what, type(exc).__name__, exc)
                elif self.force.is_set():
                    return StepResult(Landing.STOPPED)
                else:
                    self.outage.failed("settle", exc, "%s failed (%s: %s); retrying", what, type(exc).__name__, exc)
                    step = getattr(exc, "again", None) or step  # NotDurable: the step is on the master; only its WAIT is repeated
                self.sleep(min(2.0, 0.02 * 2**attempt))
        return StepResult(Landing.STOPPED)  # pragma: no cover (the loop only returns)
