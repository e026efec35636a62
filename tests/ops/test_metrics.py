"""The fleet metrics view: its output parsed with prometheus_client's parser against known queue states."""

from __future__ import annotations

import time

import pytest
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from django_redisq import signals
from django_redisq.ops.inspector import Inspector
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from tests.helpers import keys, seed_dead, seed_pending, seed_processing, seed_scheduled
from tests.testapp import tasks


def scrape(client: Client | None = None, path: str = "/metrics/", **headers: str) -> dict[tuple[str, tuple], float]:
    response = (client or Client()).get(path, headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def sample(samples: dict, name: str, queue: str = "default", **labels: str) -> float:
    return samples[(name, tuple(sorted({"backend": "default", "queue": queue, **labels}.items())))]


def test_gauges_match_a_seeded_state(r, broker):
    now_ms = int(r.time()[0]) * 1000
    seed_pending(r, "old", enqueued_at=now_ms - 42_000)  # LPUSHed first: the oldest, at the tail
    for i in range(2):
        seed_pending(r, f"p{i}", enqueued_at=now_ms)
    seed_scheduled(r, "s1", 60_000)
    seed_dead(r, "d1")
    seed_dead(r, "d2", queue="emails")
    broker.heartbeat(["default"], "w-live", {})
    seed_processing(r, "run1", "w-live")
    seed_processing(r, "run2", "w-live")
    seed_processing(r, "held1", "w-live")
    broker.running.mark("w-live", {"default": ["run1", "run2"]}, ["default"], 10.0)  # held1: fetched, not started
    s = scrape()
    assert sample(s, "redisq_queue_tasks", state="pending") == 3
    assert sample(s, "redisq_queue_tasks", state="scheduled") == 1
    assert sample(s, "redisq_queue_tasks", state="running") == 2
    assert sample(s, "redisq_queue_tasks", state="held") == 1
    assert sample(s, "redisq_queue_tasks", state="dead") == 1
    assert sample(s, "redisq_queue_tasks", queue="emails", state="dead") == 1
    assert 41 <= sample(s, "redisq_queue_latency_seconds") < 50
    assert sample(s, "redisq_queue_latency_seconds", queue="emails") == 0
    assert sample(s, "redisq_queue_workers") == 1 and sample(s, "redisq_queue_workers", queue="low") == 0
    assert s[("redisq_up", (("backend", "default"),))] == 1
    for name in ("processed", "failed", "retried", "dead_lettered", "recovered"):
        assert sample(s, f"redisq_tasks_{name}_total") == 0


def test_totals_count_what_the_scripts_did(r, make_worker):
    retried, dead = [], []
    signals.task_retried.connect(on_retried := lambda **kw: retried.append(kw), weak=False)
    signals.task_dead_lettered.connect(on_dead := lambda **kw: dead.append(kw), weak=False)
    try:
        tasks.add.enqueue(1, 2)
        tasks.add.enqueue(3, 4)
        nr = tasks.not_retryable.enqueue()
        fl = tasks.flaky.enqueue("m1", 1)  # fails once, then succeeds
        for _ in range(20):  # burst workers until the retry (10-50 ms backoff) has run too
            make_worker().run()
            if not r.zcard(keys().scheduled) and not r.llen(keys().pending):
                break
            time.sleep(0.06)
    finally:
        signals.task_retried.disconnect(on_retried)
        signals.task_dead_lettered.disconnect(on_dead)
    s = scrape()
    assert sample(s, "redisq_tasks_processed_total") == 3
    assert sample(s, "redisq_tasks_failed_total") == 2  # flaky's first attempt and not_retryable's only one
    assert sample(s, "redisq_tasks_retried_total") == 1
    assert sample(s, "redisq_tasks_dead_lettered_total") == 1
    assert sample(s, "redisq_tasks_recovered_total") == 0
    assert sample(s, "redisq_queue_tasks", state="dead") == 1
    # each signal once per event, with what the worker knew
    assert [(k["task_id"], k["attempt"], k["task_name"]) for k in retried] == [(fl.id, 1, "tests.testapp.tasks.flaky")]
    assert retried[0]["delay_ms"] >= 0 and retried[0]["error"]["exc"] == "builtins.RuntimeError"
    assert [(k["task_id"], k["reason"], k["queue"]) for k in dead] == [(nr.id, "not_retryable", "default")]
    assert dead[0]["error"]["exc"] == "builtins.KeyError"


def test_recovered_counts_tasks_reap_gave_back(r, broker):
    for i in range(3):
        seed_processing(r, f"t{i}", "dead-w")
    r.zadd(keys().workers, {"dead-w": 1})
    tasks_back, workers, recovered = broker.reap_detail("default")
    assert (tasks_back, workers) == (3, ["dead-w"])
    assert sorted((x.id, x.worker, x.task, x.deliveries) for x in recovered) == [
        (f"t{i}", "dead-w", "tests.testapp.tasks.add", 1) for i in range(3)]
    assert sample(scrape(), "redisq_tasks_recovered_total") == 3
    assert broker.reap_detail("default") == (0, [], [])


def test_one_scrape_costs_two_round_trips_whatever_the_backlog(r):
    pipe = r.pipeline(transaction=False)
    for i in range(20_000):
        pipe.lpush(keys().pending, f"x{i}")
    pipe.execute()
    before = r.info("stats")["total_commands_processed"]
    Inspector.for_alias("default").figures()
    spent = r.info("stats")["total_commands_processed"] - before - 1  # the INFO call itself
    assert spent == 1 + 3 * 15, spent  # TIME, then 15 per queue (its pause key, its busiest limit keys, its fair count; no worker registered), none per task


def test_redis_down_is_redisq_up_0_not_an_error(r):
    from django.conf import settings

    tasks_setting = {**settings.TASKS, "down": {"BACKEND": "django_redisq.backend.RedisQueueBackend", "QUEUES": ["default"],
                                                 "OPTIONS": {"REDIS_URL": "redis://127.0.0.1:1/0"}}}
    with override_settings(TASKS=tasks_setting):
        s = scrape(path="/metrics/?backend=down")
    assert s[("redisq_up", (("backend", "down"),))] == 0
    assert not [k for k in s if k[0] == "redisq_queue_tasks"]


@pytest.mark.django_db
def test_staff_only_and_token_protection(r, django_user_model):
    assert Client().get("/metrics/staff/").status_code == 302  # to the admin login
    staff = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    c = Client()
    c.force_login(staff)
    assert ("redisq_up", (("backend", "default"),)) in scrape(c, "/metrics/staff/")
    assert Client().get("/metrics/token/").status_code == 401  # no token configured: refused, never open
    with override_settings(REDISQ_METRICS_TOKEN="s3cret"):
        assert Client().get("/metrics/token/", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert Client().get("/metrics/token/").status_code == 401
        assert ("redisq_up", (("backend", "default"),)) in scrape(path="/metrics/token/", Authorization="Bearer s3cret")


def test_counters_are_kept_inside_the_scripts(r, broker):
    """retry.lua, bury.lua and reap.lua bump the totals: no Python increments them."""
    b = Broker(get_options("default"))
    seed_processing(r, "a", "w1")
    seed_processing(r, "b", "w1")
    b.retry("default", "w1", "a", 0, {"exc": "X", "msg": "m", "tb": "", "at": 0})
    b.bury("default", "w1", "b", {"exc": "X", "msg": "m", "tb": "", "at": 0}, "failed", True)
    k = keys()
    assert (r.get(k.counter("retried")), r.get(k.counter("failed")), r.get(k.counter("failed_final")),
            r.get(k.counter("dead_count"))) == ("1", "1", "1", "1")


def commands_spent(r, path: str) -> tuple[int, int]:
    """The status of a GET of ``path`` and the Redis commands it cost (INFO stats before and after)."""
    before = r.info("stats")["total_commands_processed"]
    status = Client().get(path).status_code
    return status, r.info("stats")["total_commands_processed"] - before


def test_a_repeated_backend_is_read_once(r):
    """?backend= repeated 500 times costs the Redis commands of one (it cost 500 times as many)."""
    assert Client().get("/metrics/?backend=default").status_code == 200  # the pool's connection is made: not counted below
    status, one = commands_spent(r, "/metrics/?backend=default")
    assert status == 200 and one > 1
    status, many = commands_spent(r, "/metrics/?" + "&".join(["backend=default"] * 500))
    assert (status, many) == (200, one)
    s = scrape(path="/metrics/?backend=default&backend=default")
    assert s[("redisq_up", (("backend", "default"),))] == 1 and sample(s, "redisq_queue_tasks", state="pending") == 0


def test_an_unknown_or_excessive_backend_is_a_400(r):
    for path in ("/metrics/?backend=nope", "/metrics/?backend=default&backend=nope", "/metrics/?backend="):
        response = Client().get(path)
        assert response.status_code == 400, (path, response.status_code)
        assert response["Content-Type"].startswith("text/plain")
        text = response.content.decode()
        assert text.endswith("\n") and text.count("\n") == 1 and "backend" in text, text
    distinct = "&".join(f"backend=b{i}" for i in range(1000))
    response = Client().get("/metrics/?" + distinct)
    assert response.status_code == 400 and len(response.content) < 200
