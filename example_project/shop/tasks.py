"""The shop's tasks: a receipt, a flaky supplier, a broken integration, a reminder."""

from __future__ import annotations

from django.core.cache import cache

from django_redisq import task


@task(queue_name="emails", max_retries=5, idempotency_key=lambda order_id: f"receipt-{order_id}")
def send_receipt(order_id: int) -> str:
    """Idempotent by order: enqueueing twice for one order sends one receipt."""
    from .models import Order

    order = Order.objects.get(pk=order_id)
    order.receipt_sent = True
    order.save(update_fields=["receipt_sent"])
    return f"receipt sent to {order.email}"


@task(max_retries=3)
def sync_stock(order_id: int) -> str:
    """Fails twice (a flaky supplier API), then succeeds on the third attempt."""
    key = f"sync-stock-attempts-{order_id}"
    attempts = cache.get(key, 0) + 1
    cache.set(key, attempts)
    if attempts <= 2:
        raise ConnectionError(f"supplier API timed out (attempt {attempts})")
    return f"stock synced for order {order_id} after {attempts} attempts"


@task(max_retries=1)
def notify_warehouse(order_id: int) -> None:
    """Always fails: it ends in the dead-letter queue, for the admin to review."""
    raise RuntimeError(f"warehouse endpoint rejected order {order_id}: HTTP 410 Gone")


@task(queue_name="emails")
def feedback_reminder(order_id: int) -> str:
    """Sent later (the demo delays it by two seconds)."""
    return f"asked for feedback on order {order_id}"


@task
def stock_report(periodic_tick: str = "") -> str:
    """A periodic task (SCHEDULES in settings: every 5 s); ``periodic_tick`` is the tick it runs for."""
    cache.set("shop:last_stock_report", periodic_tick, 3600)
    return f"stock report for {periodic_tick}"
