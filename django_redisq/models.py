"""``DeadLetter``: a placeholder with no table, for the admin index and permissions.

Task data lives in Redis and is read through ``ops/inspector.py``. The model only
gives the admin an entry and three permissions: "view" to look at queues,
dead letters and schedules; "change" to replay, delete and purge dead letters,
to cancel tasks, to pause or resume a queue, and to pause, resume or run now a
schedule; and "edit" (``edit_deadletter``), to change a dead letter's arguments
before replaying it. Editing is its own permission because it runs a task with
arguments of the editor's choice (any task that has a dead letter, which "run
now" and cancel can make of any scheduled task): a role that only triages
failures gets "change" and not "edit". Rewinding a topic's subscription
(``rewind_topic``, with "change") is its own permission too: it runs the
subscription's task again for every event the topic retains, which a role that
only replays single dead letters should not be able to do.
"""

from __future__ import annotations

from django.db import models

TABLE = "django_redisq_deadletter"
"""The table ``DeadLetter`` would have (it has none: ``managed = False``), given so that no model here reads the backend."""


class DeadLetter(models.Model):
    # "<alias>/<queue>/<task id>" (or "<alias>/schedule:<name>"): LogEntry rows point
    # here, and the admin's change URL for it redirects to the task's page (or the schedules)
    id = models.CharField(primary_key=True, max_length=300)

    class Meta:
        managed = False
        # named, as Django would name it: a model without a db_table asks the database backend for its longest name,
        # and that loads the backend (sqlparse with it) in every process, a worker that never touches the database too
        db_table = TABLE
        default_permissions = ("view", "change")
        permissions = [("edit_deadletter", "Can edit a dead letter's arguments and replay it (runs its task with them)"),
                       ("rewind_topic", "Can rewind a topic subscription (re-runs its retained events)")]
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"

    def __str__(self) -> str:
        return self.id


class _Page:
    """Meta of the admin index entries below: proxies of ``DeadLetter`` with no table and no permissions of their own."""

    proxy = True
    db_table = TABLE  # the parent's, given for the reason DeadLetter gives it (Django would read the backend first)
    default_permissions: tuple[str, ...] = ()
    permissions: list[tuple[str, str]] = []


# The admin's other pages as entries of the app on the admin index (admin/index.py): each a proxy of DeadLetter,
# so none has a table or permissions of its own; "view" and "change" of DeadLetter decide what a user sees and does.


class Queue(DeadLetter):
    class Meta(_Page):
        verbose_name = "queue"
        verbose_name_plural = "queues"


class PendingTask(DeadLetter):
    class Meta(_Page):
        verbose_name = "pending task"
        verbose_name_plural = "pending tasks"


class ScheduledTask(DeadLetter):
    class Meta(_Page):
        verbose_name = "scheduled task"
        verbose_name_plural = "scheduled tasks"


class RunningTask(DeadLetter):
    class Meta(_Page):
        verbose_name = "running task"
        verbose_name_plural = "running tasks"


class Schedule(DeadLetter):
    class Meta(_Page):
        verbose_name = "schedule"
        verbose_name_plural = "schedules"


class Topic(DeadLetter):
    class Meta(_Page):
        verbose_name = "topic"
        verbose_name_plural = "topics"


class Workflow(DeadLetter):
    class Meta(_Page):
        verbose_name = "workflow"
        verbose_name_plural = "workflows"
