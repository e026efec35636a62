import logging
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.utils.module_loading import import_string

BACKEND_CLASS = "RedisQueueBackend"
SUCCESS_LOGGER = "django_redisq.tasks.success"
"""The worker's one INFO line per successful task (worker/observability/tasklog.py): off unless LOGGING names it or ``runworker -v 2``."""


def _ours(path: Any) -> bool:
    """Whether a TASKS entry's BACKEND is django_redisq's backend (or a subclass of it)."""
    try:
        cls = import_string(path)
    except Exception:  # noqa: BLE001 - the framework's own check reports a BACKEND that does not import
        return isinstance(path, str) and path.startswith("django_redisq.")
    return any(c.__name__ == BACKEND_CLASS and c.__module__.startswith("django_redisq.") for c in getattr(cls, "__mro__", ()))


def check_setup(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """E081 / W081: the app is installed but no ``TASKS`` backend is ours, so ``.delay()`` would not reach Redis.

    An error when ``TASKS`` is not set at all (Django's default runs every task inline,
    in the request); a warning when it is set to other backends on purpose (a test
    settings module with the ImmediateBackend), which ``SILENCED_SYSTEM_CHECKS`` takes.
    """
    tasks = getattr(settings, "TASKS", None)
    if isinstance(tasks, dict) and any(isinstance(p, dict) and _ours(p.get("BACKEND")) for p in tasks.values()):
        return []
    example = ('TASKS = {"default": {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": ["default"], '
               '"OPTIONS": {"REDIS_URL": "redis://localhost:6379/0"}}}')
    if not settings.is_overridden("TASKS"):  # type: ignore[misc]
        return [checks.Error(
            "django_redisq is in INSTALLED_APPS but TASKS is not set: Django's default backend runs every task "
            "inline, in the caller, and nothing reaches Redis or a worker.",
            hint=f"Add to your settings: {example}", id="django_redisq." + "E081")]
    return [checks.Warning(
        "django_redisq is in INSTALLED_APPS but no TASKS backend is django_redisq.backend.RedisQueueBackend: "
        "tasks do not reach Redis, and runworker has nothing to serve.",
        hint=f"Name it in TASKS, e.g. {example}; or silence django_redisq.W081 where that is meant (test settings).",
        id="django_redisq." + "W081")]


class RedisQConfig(AppConfig):
    name = "django_redisq"
    label = "django_redisq"
    verbose_name = "Task queue"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        checks.register(check_setup)
        # a line per successful task is opt-in: it costs a no-op drain about a fifth of its rate
        # (worker/observability/tasklog.py); LOGGING's "loggers" naming it (at INFO) turns it on
        if SUCCESS_LOGGER not in ((getattr(settings, "LOGGING", None) or {}).get("loggers") or {}):
            logging.getLogger(SUCCESS_LOGGER).setLevel(logging.WARNING)
