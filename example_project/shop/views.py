from decimal import Decimal

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from .models import Order
from .tasks import send_receipt


def place_order(request: HttpRequest) -> HttpResponse:
    """GET: a form. POST: create an order and send its receipt in the background."""
    if request.method == "POST":
        order = Order.objects.create(email=request.POST.get("email") or "buyer@example.com", amount=Decimal("19.90"))
        result = send_receipt.delay(order.pk)
        order.receipt_task_id = result.id
        order.save(update_fields=["receipt_task_id"])
        return redirect("order-detail", pk=order.pk)
    return render(request, "shop/place_order.html")


def order_detail(request: HttpRequest, pk: int) -> HttpResponse:
    order = get_object_or_404(Order, pk=pk)
    result = send_receipt.get_result(order.receipt_task_id) if order.receipt_task_id else None
    return render(request, "shop/order_detail.html", {"order": order, "result": result})
