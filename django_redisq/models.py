"""``DeadLetter``: a placeholder with no table, for the admin index and permissions.

Task data lives in Redis and is read through ``ops/inspector.py``. The model only
gives the admin an entry and two permissions: "view" to look at queues,
dead letters and schedules, "change" to replay, delete, edit and purge dead
letters, to cancel tasks, to pause or resume a queue, and to pause, resume or
run now a schedule.
"""

from __future__ import annotations

from django.db import models


class DeadLetter(models.Model):
    # "<alias>/<queue>/<task id>" (or "<alias>/schedule:<name>"): LogEntry rows point
    # here, and the admin's change URL for it redirects to the task's page (or the schedules)
    id = models.CharField(primary_key=True, max_length=300)

    class Meta:
        managed = False
        default_permissions = ("view", "change")
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"

    def __str__(self) -> str:
        return self.id
