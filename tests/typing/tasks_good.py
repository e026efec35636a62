"""What a type checker knows of a task: ``assert_type`` on each; mypy must find nothing here (tests/typing/test_typing.py).

Never imported by the suite: only mypy reads it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from typing_extensions import assert_type

from django_redisq import RedisTask, task
from django_redisq.compat import TaskContext


@task
def send_receipt(order_id: int) -> str:
    return f"receipt for {order_id}"


@task(queue_name="emails", max_retries=5)
def notify(user_id: int, *, text: str = "") -> bool:
    return bool(user_id and text)


@task
async def fetch_page(url: str) -> bytes:
    return url.encode()


@task(takes_context=True)
def with_context(context: TaskContext[Any, Any], n: int) -> int:
    return context.attempt + n


# the parameters: a task is assignable to a RedisTask of its parameter types (mypy names them, so
# assert_type would need its Arg(...) spelling); tasks_bad.py proves that other arguments are refused
receipt_task: RedisTask[[int], str] = send_receipt
notify_task: RedisTask[[int], bool] = notify
page_task: RedisTask[[str], bytes] = fetch_page
context_task: RedisTask[[int], int] = with_context

# the return type, through every way of enqueueing and reading a result
assert_type(send_receipt.delay(7).return_value, str)
assert_type(send_receipt.enqueue(7).return_value, str)
assert_type(send_receipt.using(run_after=timedelta(minutes=5)).enqueue(7).return_value, str)
assert_type(send_receipt.using(priority=10, max_retries=2).delay(7).return_value, str)
assert_type(send_receipt.get_result("an-id").return_value, str)
assert_type(send_receipt.call(7), str)
assert_type(notify.delay(1, text="hi").return_value, bool)
assert_type(notify.get_result("an-id").return_value, bool)
assert_type(fetch_page.get_result("an-id").return_value, bytes)  # a coroutine function's task: what it awaits
assert_type(fetch_page.call("u"), bytes)
assert_type(with_context.delay(3).return_value, int)  # a task that takes a context is called without it
assert_type(send_receipt.delay_on_commit(7), None)
assert_type([r.return_value for r in send_receipt.enqueue_many([((7,), {})])], list[str])


async def awaited() -> None:
    assert_type((await send_receipt.aenqueue(7)).return_value, str)
    assert_type((await send_receipt.aget_result("an-id")).return_value, str)
    assert_type(await send_receipt.acall(7), str)
