"""Run times per task and minute: written by a real worker in its ack round trip, read back as p50/p95, bounded."""

from __future__ import annotations

from collections import Counter

import pytest

from django_redisq.ops.inspector import Inspector
from django_redisq.store.reads import durations
from tests import helpers
from tests.testapp import tasks


def test_buckets_are_about_a_fifth_wide_and_percentiles_interpolate():
    assert durations.bucket(0) == 0 and durations.bucket(0.001) == 0
    assert durations.bucket(10**6) == durations.BUCKETS - 1
    for seconds in (0.0015, 0.01, 0.2, 3.0, 120.0):
        b = durations.bucket(seconds)
        assert durations.upper_ms(b - 1) < seconds * 1000 <= durations.upper_ms(b)
    counts = Counter({durations.bucket(0.01): 90, durations.bucket(1.0): 10})
    for q, seconds in ((0.5, 0.01), (0.95, 1.0)):  # inside the bucket holding the true value: within ~19 %
        b = durations.bucket(seconds)
        assert durations.upper_ms(b - 1) / 1000 < durations.percentile(counts, q) <= durations.upper_ms(b) / 1000
    assert durations.percentile(Counter(), 0.5) == 0.0


def test_a_worker_run_records_durations_that_read_back_as_sane_percentiles(r, make_worker):
    for i in range(8):
        tasks.sleeper.delay(f"d{i}", 0.02)
    for i in range(4):
        tasks.slow.delay(f"s{i}", 0.25)
    tasks.add.delay(1, 2)
    make_worker().run()
    [stats] = [s for s in Inspector.for_alias().stats() if s.queue == "default"]
    by_name = {t.task: t for t in stats.slowest}
    slow, sleeper = by_name["tests.testapp.tasks.slow"], by_name["tests.testapp.tasks.sleeper"]
    assert {t.task for t in stats.slowest[:2]} == {"tests.testapp.tasks.slow", "tests.testapp.tasks.sleeper"}
    assert (slow.runs, sleeper.runs, by_name["tests.testapp.tasks.add"].runs) == (4, 8, 1)
    # a sleep lasts at least its time (less the bucket's ~19 %): the lower bounds and the medians' order hold however
    # busy the machine; the upper bounds only catch a wrong unit or scale (a loaded CI run stretched one of the
    # 0.02 s sleeps to 0.28 s: about 0.021 / 0.3 s quiet)
    assert 0.21 <= slow.p50 <= slow.p95 < 5, slow
    assert 0.017 <= sleeper.p50 <= sleeper.p95 < 5, sleeper
    assert max(by_name["tests.testapp.tasks.add"].p50, sleeper.p50) < slow.p50


def test_the_minute_hash_expires_and_keeps_a_bounded_number_of_task_names(r, broker):
    runs = [(f"app.tasks.t{i:03}", 0.001 * (i + 1)) for i in range(durations.MAX_NAMES + 20)]
    broker.ack_many("default", "w1", [], runs=runs[:30])
    broker.ack_many("default", "w1", [], runs=runs[30:])  # a second batch: the cap holds across calls
    broker.ack_many("default", "w1", [], runs=[("app.tasks.t000", 0.5)])  # a name already in keeps its own fields
    [key] = r.keys(helpers.keys().prefix + "durations:*")
    assert 60 * 60 * 1000 < r.pttl(key) <= durations.TTL_MS
    h = r.hgetall(key)
    names = {f.rpartition("|")[0] for f in h if "|" in f}
    assert len(names) == durations.MAX_NAMES + 1 and durations.OTHER in names
    assert h["~names"] == str(durations.MAX_NAMES) and h[durations.OTHER + "|n"] == "20"
    assert h["app.tasks.t000|n"] == "2"
    assert len(h) <= (durations.MAX_NAMES + 1) * (durations.BUCKETS + 1) + 1


def test_the_run_times_of_one_batch_travel_grouped(r, broker):
    helpers.seed_processing(r, "t0", "w1")
    helpers.seed_processing(r, "t1", "w1")
    argv = durations.triples([("a", 0.01), ("a", 0.01), ("b", 0.3)])
    assert argv == ["a", durations.bucket(0.01), 2, "b", durations.bucket(0.3), 1]
    assert broker.ack_many("default", "w1", [("t0", "1"), ("t1", "2")], runs=[("a", 0.01), ("a", 0.01)]) == []
    assert helpers.where_is(r, "t0") == ["finished"] and r.hget(helpers.keys().task("t1"), "result") == "2"


@pytest.mark.django_db
def test_the_queues_page_shows_the_slowest_tasks_and_the_failure_rate(r, admin_client, make_worker):
    tasks.slow.delay("page", 0.1)
    tasks.always_fails.delay("x")
    make_worker().run()
    from django.urls import reverse

    body = admin_client.get(reverse("admin:django_redisq_deadletter_queues")).content.decode()
    assert 'id="redisq-slowest-default"' in body and "tests.testapp.tasks.slow" in body
    assert "66.7%" in body  # 1 success, 1 failed attempt and 1 dead letter of always_fails (max_retries=1)
