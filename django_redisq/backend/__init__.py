"""The Django Tasks backend: ``TASKS[alias]["BACKEND"] = "django_redisq.backend.RedisQueueBackend"``.

``queue_backend`` is the backend; ``sending`` builds what an enqueue sends and
``results`` reads a task back, each once, as a plan that ``wire`` runs with
blocking calls or on the event loop; ``by_alias`` holds what takes an alias.
"""

from django_redisq.backend.by_alias import aget_progress, cancel, get_progress
from django_redisq.backend.queue_backend import NOT_INSTALLED, VALIDATED_MAX, RedisQueueBackend
from django_redisq.backend.sending import ID_START
from django_redisq.core.states import STATE_TO_STATUS

__all__ = ["ID_START", "NOT_INSTALLED", "STATE_TO_STATUS", "VALIDATED_MAX", "RedisQueueBackend", "aget_progress",
           "cancel", "get_progress"]
