"""Django settings for the benchmark: the bench app, one SQLite in-memory database, three queues.

``bench/run.py`` sets ``BENCH_REDIS_URL`` to its own throwaway redis-server before
Django starts, in its own process and in every ``runworker`` it launches.
"""

import os

SECRET_KEY = "bench-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS: list[str] = []
INSTALLED_APPS = ["django_redisq", "benchapp"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
TASKS = {
    "default": {
        "BACKEND": "django_redisq.backend.RedisQueueBackend",
        # most important first; the three-queue latency run sends its task to "low"
        "QUEUES": ["default", "mid", "low"],
        "OPTIONS": {"REDIS_URL": URL},
    },
    # the same server's database 1: the flatness run keeps its big backlog there
    "big": {
        "BACKEND": "django_redisq.backend.RedisQueueBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"REDIS_URL": URL.rsplit("/", 1)[0] + "/1"},
    },
}

# BENCH_SCHEDULES=N gives the workers N schedules, every BENCH_SCHEDULE_EVERY seconds (default 1; their tasks
# go to "low", which the drain workers do not serve): what a scheduler costs a worker draining a backlog
if os.environ.get("BENCH_SCHEDULES"):
    TASKS["default"]["OPTIONS"]["SCHEDULES"] = {
        f"bench-{i}": {"task": "benchapp.tasks.noop", "every": int(os.environ.get("BENCH_SCHEDULE_EVERY", "1")), "args": [i], "queue_name": "low"}
        for i in range(int(os.environ["BENCH_SCHEDULES"]))
    }

# BENCH_LOGGING=console: a typical console LOGGING (a StreamHandler to stderr for the django_redisq logger at INFO;
# the harness sends the worker's stderr to a file); unset or "none": no LOGGING setting (runworker's own handler)
if os.environ.get("BENCH_LOGGING", "none") == "console":
    LOGGING = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "{asctime} {levelname} {name} {message}", "style": "{"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
        "loggers": {"django_redisq": {"handlers": ["console"], "level": "INFO"}},
    }

# BENCH_PARTITIONS=N: queue "low" is partitioned over N hash tags (the partitions section of bench/run.py;
# N=1 is the plain queue), in the bench process and in the workers it starts
if os.environ.get("BENCH_PARTITIONS"):
    TASKS["default"]["OPTIONS"]["QUEUE_OPTIONS"] = {"low": {"PARTITIONS": int(os.environ["BENCH_PARTITIONS"])}}
