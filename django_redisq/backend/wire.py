"""One plan, two wires: what the backend reads is built once, as a plan, and run by blocking calls or awaited.

A plan is a generator that yields the store steps it needs next (a list: steps
of one list are independent) and gets back their replies in that order;
``run`` answers them with the backend's blocking broker, ``arun`` with its
async broker on the running loop (the steps of one list at once). So
``get_result`` / ``aget_result`` and ``get_progress`` / ``aget_progress`` are
each one plan and cannot drift. The enqueue, the hot path, shares its logic
another way (backend/sending.py ``Batch``): a generator there cost a quarter of
``.delay()``'s Python time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from django_redisq.store.broker import Broker

if TYPE_CHECKING:
    from django_redisq.store.broker.async_broker import AsyncBroker

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GetTask:
    """Find a task's hash in ``queues``; replies with (queue, hash) or None."""

    task_id: str
    queues: list[str]


Step = GetTask
Plan = Generator[list[Step], list[Any], T]
"""A plan answering to ``T``: see the module docstring."""


def _call(broker: Broker, step: Step) -> Any:
    return broker.get_task(step.task_id, step.queues)


def run(plan: Plan[T], broker: Broker) -> T:
    """The plan's answer, its steps run one after the other with blocking calls."""
    try:
        steps = next(plan)
        while True:
            steps = plan.send([_call(broker, step) for step in steps])
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def _acall(abroker: AsyncBroker, step: Step) -> Any:
    return await abroker.get_task(step.task_id, step.queues)


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
