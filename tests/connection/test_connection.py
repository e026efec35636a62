"""Connections: URL, cache alias, embedded; Redis restarts while a worker runs."""

import copy
import threading
import time

import pytest
import redis
from django.test import override_settings

from django_redisq import connection
from django_redisq.connection.embedded import EmbeddedServer
from django_redisq.exceptions import RedisUnavailable
from django_redisq.settings.read import get_options
from django_redisq.store.server import check_server, describe
from django_redisq.testing import RedisServer
from tests.helpers import keys, where_is
from tests.testapp import tasks
from tests.testapp.tasks import EFFECTS


def tasks_setting(**options):
    from django.conf import settings

    value = copy.deepcopy(settings.TASKS)
    value["default"]["OPTIONS"] = {k: v for k, v in value["default"]["OPTIONS"].items() if k != "REDIS_URL"} | options
    return value


def test_describe_never_shows_the_password():
    from dataclasses import replace

    o = replace(get_options("default"), redis_url="redis://user:s3cret@10.1.2.3:6380/2")
    assert describe(o) == "redis://10.1.2.3:6380/2"


def test_unreachable_is_one_clear_error():
    with override_settings(TASKS=tasks_setting(REDIS_URL="redis://:pw@127.0.0.1:1/0")):
        with pytest.raises(RedisUnavailable, match=r"cannot reach Redis at redis://127\.0\.0\.1:1/0") as info:
            check_server(get_options("default"))
    assert "pw" not in str(info.value)


def test_cache_alias_reuses_the_caches_connection_settings(r, redis_url):
    caches = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}}
    with override_settings(CACHES=caches, TASKS=tasks_setting(CACHE_ALIAS="default")):
        connection.reset()
        result = tasks.noop.delay(1)
        assert r.lindex(keys().pending, 0) == result.id
        assert get_options("default").cache_alias == "default"
    connection.reset()


def test_embedded_redis(tmp_path, make_worker):
    with override_settings(TASKS=tasks_setting(EMBEDDED=True, EMBEDDED_PATH=str(tmp_path / "q.rdb"))):
        connection.reset()
        try:
            result = tasks.add.delay(20, 22)
            make_worker().run()
            assert tasks.add.get_result(result.id).return_value == 42
            assert "embedded Redis" in describe(get_options("default"))
        finally:
            connection.reset()
            EmbeddedServer.of(str(tmp_path / "q.rdb")).stop()  # it outlives its process by design: not the suite's


@pytest.mark.slow
def test_redis_restart_while_the_worker_runs_loses_nothing(make_worker):
    """With appendonly yes, restarting redis-server mid-run loses no task; the worker reconnects."""
    with RedisServer(appendonly=True) as srv, override_settings(TASKS=tasks_setting(REDIS_URL=srv.url)):
        connection.reset()
        client = redis.Redis.from_url(srv.url, decode_responses=True)
        try:
            results = tasks.work_retrying.enqueue_many([([f"r{i}"], {}) for i in range(300)])
            worker = make_worker("emails", burst=False, concurrency=2)
            thread = threading.Thread(target=worker.run)
            thread.start()
            deadline = time.monotonic() + 20
            while int(client.hlen(EFFECTS)) < 50 and time.monotonic() < deadline:
                time.sleep(0.01)
            srv.restart()  # SIGTERM: the AOF is fsynced on every write (appendfsync always)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if int(client.hlen(EFFECTS)) == 300 and not any(
                        where_is(client, x.id, "emails") != ["finished"] for x in results[-5:]
                    ):
                        break
                except redis.ConnectionError:
                    pass
                time.sleep(0.1)
            assert thread.is_alive(), "the worker died with Redis"
            worker.request_stop()
            thread.join(20)
            missing = {x.id: (where_is(client, x.id, "emails"), client.hgetall(keys("emails").task(x.id)), client.get(keys("emails").status(x.id)))
                       for x in results if where_is(client, x.id, "emails") != ["finished"]}
            assert missing == {}
            assert int(client.hlen(EFFECTS)) == 300
        finally:
            client.close()
            connection.reset()
