"""The one table from a task's state in Redis (``store/keys.py`` ``STATES``) to Django's ``TaskResultStatus``.

The backend builds a ``TaskResult`` from it, and so does a workflow step whose task is no longer registered
(``workflows/steps.py``): one table, so the two cannot disagree.
"""

from __future__ import annotations

from django_redisq.compat import TaskResultStatus

STATE_TO_STATUS: dict[str, TaskResultStatus] = {
    "pending": TaskResultStatus.READY,
    "scheduled": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "finished": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "moving": TaskResultStatus.FAILED,  # a dead letter being replayed into another queue
}
