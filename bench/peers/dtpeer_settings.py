"""Django settings of a Django Tasks peer's worker and producer (``BENCH_DT_PEER``: vtasks or tasks-redis).

``BENCH_LOGGING=console`` adds a typical console LOGGING: a StreamHandler to stderr for the peer's
logger at INFO (the harness sends the worker's stderr to a file), as for django-redisq.
"""

import os

PEER = os.environ.get("BENCH_DT_PEER", "vtasks")
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
# name: (backend class, its OPTIONS key for the URL, installed app, its logger)
PEERS_OF = {
    "vtasks": ("django_vtasks.backends.valkey.ValkeyTaskBackend", "BROKER_URL", "django_vtasks", "django_vtasks"),
    "tasks-redis": ("django_tasks_redis.backends.RedisTaskBackend", "REDIS_URL", "django_tasks_redis", "django_tasks_redis"),
}
BACKEND, URL_OPTION, APP, LOGGER = PEERS_OF[PEER]

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS: list[str] = []
INSTALLED_APPS = [APP]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": {URL_OPTION: URL}}}
if PEER == "vtasks":
    VTASKS_RUN_SCHEDULER = False  # no periodic tasks here

if os.environ.get("BENCH_LOGGING", "none") == "console":
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "{asctime} {levelname} {name} {message}", "style": "{"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
        "loggers": {LOGGER: {"handlers": ["console"], "level": "INFO"}},
    }
