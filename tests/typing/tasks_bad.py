"""Calls a type checker must refuse: each line ending in ``# E: <code>`` must get exactly that mypy error, and no
other line any (tests/typing/test_typing.py). Never imported by the suite: only mypy reads it.
"""

from __future__ import annotations

from typing import Any

from django_redisq import task
from django_redisq.compat import TaskContext


@task
def send_receipt(order_id: int) -> str:
    return f"receipt for {order_id}"


@task(queue_name="emails")
def notify(user_id: int, *, text: str = "") -> bool:
    return bool(user_id and text)


@task(takes_context=True)
def with_context(context: TaskContext[Any, Any], n: int) -> int:
    return context.attempt + n


send_receipt.delay("x")  # E: arg-type
send_receipt.enqueue()  # E: call-arg
send_receipt.enqueue(1, 2)  # E: call-arg
send_receipt.using(priority=1).enqueue("x")  # E: arg-type
send_receipt.delay_on_commit(order="x")  # E: call-arg
notify.delay(1, txt="hi")  # E: call-arg
notify.delay(1, text=2)  # E: arg-type
with_context.delay("3")  # E: arg-type
total: int = send_receipt.get_result("an-id").return_value  # E: assignment
name: str = notify.call(1)  # E: assignment


async def awaited() -> None:
    await send_receipt.aenqueue(order_id="x")  # E: arg-type
