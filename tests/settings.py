"""Settings for the test suite. The Redis URL is filled in by conftest.py."""

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_redisq",
    "tests.testapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "tests.urls"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
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
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
STATIC_URL = "/static/"
TASKS = {
    "default": {
        "BACKEND": "django_redisq.backend.RedisQueueBackend",
        "QUEUES": ["default", "emails", "low"],
        "OPTIONS": {"REDIS_URL": "redis://127.0.0.1:1/0", "BACKOFF_BASE": 0.01, "BACKOFF_MAX": 0.05,
                    # tasks outside tests/testapp/tasks.py that tests enqueue: a worker imports these too (settings/discovery.py)
                    "IMPORTS": ["tests.testapp.contract_tasks", "tests.testapp.retry_tasks", "tests.testapp.metadata_tasks",
                                "tests.testapp.integration_tasks", "tests.testapp.workflow_tasks"]},
    }
}
