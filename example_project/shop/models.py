from django.db import models


class Order(models.Model):
    email = models.EmailField()
    amount = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(auto_now_add=True)
    receipt_task_id = models.CharField(max_length=64, blank=True)
    receipt_sent = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"Order #{self.pk} ({self.email})"
