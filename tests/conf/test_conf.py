import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_redisq.compat import task_backends
from django_redisq.core.options import Options
from django_redisq.settings.read import build_options, get_options, validate

BACKEND = "django_redisq.backend.RedisQueueBackend"


def ids(params):
    return [c for c, _, _ in validate("default", params)]


def test_defaults():
    o = build_options("default", {"QUEUES": ["a"]})
    assert o.redis_url == "redis://127.0.0.1:6379/0" and o.max_retries == 3 and o.queues == ("a",)
    assert o.heartbeat_interval == 2 and o.worker_timeout == 10


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"QUEUES": []}, ["E001"]),
        ({"QUEUES": ["a{b}"]}, ["E002"]),
        ({"QUEUES": ["has space"]}, ["E002"]),
        ({"OPTIONS": []}, ["E003"]),
        ({"OPTIONS": {"MAX_RETRIESS": 3}}, ["E004"]),
        ({"OPTIONS": {"REDIS_URL": "redis://x", "EMBEDDED": True}}, ["E005"]),
        ({"OPTIONS": {"REDIS_URL": "http://x"}}, ["E006"]),
        ({"OPTIONS": {"CACHE_ALIAS": "nope"}}, ["E007"]),
        ({"OPTIONS": {"KEY_PREFIX": "a{b"}}, ["E011"]),
        ({"OPTIONS": {"MAX_RETRIES": "3"}}, ["E012"]),
        ({"OPTIONS": {"MAX_RETRIES": -1}}, ["E012"]),
        ({"OPTIONS": {"MAX_RETRIES": True}}, ["E012"]),
        ({"OPTIONS": {"BACKOFF_BASE": 0.5, "DEAD_LETTER_MAX": 2.5}}, ["E012"]),
        ({"OPTIONS": {"RESULT_MAX_BYTES": 10}}, ["E012"]),
        ({"OPTIONS": {"QUEUE_OPTIONS": {"default": {"RESULT_MAX_BYTES": 1.5}}}}, ["E012"]),
        ({"OPTIONS": {"QUEUE_OPTIONS": []}}, ["E013"]),
        ({"OPTIONS": {"QUEUE_OPTIONS": {"other": {}}}}, ["E014"]),
        ({"OPTIONS": {"QUEUE_OPTIONS": {"default": {"PREFETCH": 3}}}}, ["E015"]),
        ({"OPTIONS": {"HEARTBEAT_INTERVAL": 5, "WORKER_TIMEOUT": 6}}, ["E016"]),
    ],
)
def test_bad_settings_are_named(params, expected):
    assert ids(params) == expected


def test_messages_say_how_to_fix():
    [(_cid, msg, hint)] = validate("default", {"OPTIONS": {"MAX_RETRIES": "3"}})
    assert "MAX_RETRIES must be a whole number" in msg and "reference/settings" in hint


def test_result_max_bytes_defaults_to_a_mebibyte_and_is_per_queue():
    o = build_options("default", {"QUEUES": ["a", "b"], "OPTIONS": {"QUEUE_OPTIONS": {"b": {"RESULT_MAX_BYTES": 4096}}}})
    assert o.result_max_bytes == 1024 * 1024 and o.for_queue("b").result_max_bytes == 4096


def test_per_queue_overrides():
    o = build_options("default", {"QUEUES": ["a", "b"], "OPTIONS": {"MAX_RETRIES": 1, "QUEUE_OPTIONS": {"b": {"MAX_RETRIES": 7}}}})
    assert o.for_queue("a").max_retries == 1 and o.for_queue("b").max_retries == 7


def test_cache_alias_must_be_django_redis():
    caches = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    with override_settings(CACHES=caches):
        assert ids({"OPTIONS": {"CACHE_ALIAS": "default"}}) == ["E008"]


def test_runtime_error_lists_every_problem():
    with pytest.raises(ImproperlyConfigured, match=r"\[E004\].*\n.*\[E012\]"):
        build_options("default", {"OPTIONS": {"NOPE": 1, "MAX_RETRIES": -2}})


def test_system_check_reports_bad_settings():
    tasks = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": {"MAX_RETRIES": "x"}}}
    with override_settings(TASKS=tasks), pytest.raises(SystemCheckError, match=r"django_redisq\.E012"):
        call_command("check")


def test_backend_init_does_no_io():
    from django_redisq.compat import task_backends

    tasks = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": {"REDIS_URL": "redis://127.0.0.1:1/0"}}}
    with override_settings(TASKS=tasks):
        backend = task_backends["default"]  # an unreachable server: building must not touch it
        assert backend.alias == "default"


def test_get_options_unknown_alias():
    with pytest.raises(ImproperlyConfigured, match="no backend 'nope'"):
        get_options("nope")


def test_options_are_frozen():
    with pytest.raises(AttributeError):
        Options().max_retries = 5  # type: ignore[misc]


def test_cache_alias_without_django_redis_installed_is_a_clear_check_error(monkeypatch):
    """django-redis is an optional extra: CACHE_ALIAS without it is check E018 naming the extra, and the runtime says the same."""
    from django_redisq.connection.clients import pool_kwargs

    caches = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:6379/0"}}
    monkeypatch.setitem(sys.modules, "django_redis", None)  # import django_redis now raises ImportError
    tasks = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": {"CACHE_ALIAS": "default"}}}
    with override_settings(CACHES=caches, TASKS=tasks):
        assert ids({"OPTIONS": {"CACHE_ALIAS": "default"}}) == ["E018"]
        # the backend's system check (Django's cache checks, run first by `manage.py check`, only say the module is missing)
        [error] = task_backends["default"].check()
        assert error.id == "django_redisq.E018" and 'pip install "django-redisq[django-redis]"' in error.hint
        with pytest.raises(ImproperlyConfigured, match=r"django-redisq\[django-redis\]"):
            pool_kwargs(Options(cache_alias="default"))


def test_cache_alias_with_django_redis_installed_passes_the_checks():
    caches = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:6379/0"}}
    with override_settings(CACHES=caches):
        assert ids({"OPTIONS": {"CACHE_ALIAS": "default"}}) == []
