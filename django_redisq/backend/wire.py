"""One plan, two wires: what the backend sends is built once, as a plan, and run by blocking calls or awaited.

A plan is a generator that yields the store steps it needs next (a list: steps
of one list are independent) and gets back their replies in that order;
``run`` answers them with the backend's blocking broker, ``arun`` with its
async broker on the running loop (the steps of one list at once). So
``enqueue_many`` / ``aenqueue_many``, ``get_result`` / ``aget_result`` and
``get_progress`` / ``aget_progress`` are each one plan and cannot drift.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from django_redisq.compat import TaskResult, task_enqueued
from django_redisq.store.broker import Broker
from django_redisq.store.steps.replies import NewTask

if TYPE_CHECKING:
    from django_redisq.store.broker.async_broker import AsyncBroker

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Enqueue:
    """Store ``items`` in ``queue`` (enqueue.lua); replies with their ``Enqueued`` outcomes."""

    queue: str
    items: list[NewTask]


@dataclass(frozen=True, slots=True)
class GetTask:
    """Find a task's hash in ``queues``; replies with (queue, hash) or None."""

    task_id: str
    queues: list[str]


@dataclass(frozen=True, slots=True)
class Announce:
    """Send ``task_enqueued`` for ``result`` from ``sender``; replies None."""

    sender: type[Any]
    result: TaskResult


Step = Enqueue | GetTask | Announce
Plan = Generator[list[Step], list[Any], T]
"""A plan answering to ``T``: see the module docstring."""


def _call(broker: Broker, step: Step) -> Any:
    if isinstance(step, Enqueue):
        return broker.enqueue(step.queue, step.items)
    if isinstance(step, GetTask):
        return broker.get_task(step.task_id, step.queues)
    task_enqueued.send(step.sender, task_result=step.result)
    return None


def run(plan: Plan[T], broker: Broker) -> T:
    """The plan's answer, its steps run one after the other with blocking calls."""
    try:
        steps = next(plan)
        while True:
            steps = plan.send([_call(broker, step) for step in steps])
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _acall(abroker: AsyncBroker, step: Step) -> Any:
    if isinstance(step, Enqueue):
        return await abroker.enqueue(step.queue, step.items)
    if isinstance(step, GetTask):
        return await abroker.get_task(step.task_id, step.queues)
    from django_redisq.store.broker.async_broker import send_enqueued  # the async steps load on first await, never in a worker

    await send_enqueued(step.sender, step.result)
    return None


async def arun(plan: Plan[T], abroker: AsyncBroker) -> T:
    """The plan's answer, awaited on the running loop: the steps of one list at once, with no thread."""
    try:
        steps = next(plan)
        while True:
            replies = [await _acall(abroker, steps[0])] if len(steps) == 1 else await asyncio.gather(
                *(_acall(abroker, step) for step in steps))
            steps = plan.send(list(replies))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
