"""Partitioned queues (core/partitions.py) on the single test server: one logical queue over 8 hash tags.

``QUEUE_OPTIONS["low"]["PARTITIONS"] = 8`` stores ``low`` as ``low``, ``low~1`` .. ``low~7``.
Enqueue spreads tasks round-robin (or by idempotency key), a worker serving ``low`` drains
every partition, and the admin, the CLI, metrics and get_result see one queue ``low``.
The same over a real Redis Cluster is in tests/topologies/test_cluster.py.
"""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from django_redisq import connection
from django_redisq.compat import TaskResultStatus, task_backends
from django_redisq.core import partitions
from django_redisq.ops.inspector import Inspector
from django_redisq.settings.read import get_options, validate
from django_redisq.store.keys import QueueKeys
from django_redisq.worker.fetching.queue_order import QueueOrder
from django_redisq.worker.worker import Worker
from tests.testapp import topology_tasks
from tests.testapp.topology_tasks import always_fails, mark, runs

N = 8
PHYSICAL = ["low", *(f"low~{i}" for i in range(1, N))]


def partitioned(n: int = N, **more: Any) -> Any:
    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["OPTIONS"]["QUEUE_OPTIONS"] = {"low": {"PARTITIONS": n, **more}}
    return override_settings(TASKS=tasks)


@pytest.fixture
def low(r: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(topology_tasks, "EFFECTS_URL", redis_url)
    with partitioned():
        connection.reset()
        yield r
    connection.reset()


def pending(r: Any) -> dict[str, int]:
    return {q: r.llen(QueueKeys(q).pending) for q in PHYSICAL}


def test_names_and_the_default_layout():
    assert partitions.physical("low", 1) == ["low"]  # the default: today's queue, nothing else
    assert partitions.physical("low", 3) == ["low", "low~1", "low~2"]
    assert [partitions.logical(q) for q in partitions.physical("low", 3)] == ["low"] * 3
    assert partitions.index("low~2") == 2 and partitions.index("low") == 0
    assert {partitions.by_key("low", 8, "order-42") for _ in range(5)} == {partitions.by_key("low", 8, "order-42")}
    assert partitions.pick("low", 1, "k") == "low"
    opts = get_options()
    assert opts.physical("low") == ["low"] and opts.partitions("low") == 1
    with partitioned():
        opts = get_options()
        assert opts.physical("low") == PHYSICAL and opts.physical("default") == ["default"]
        assert opts.for_queue("low~5").max_retries == opts.for_queue("low").max_retries


@pytest.mark.parametrize(("value", "code"), [(0, "E071"), (1025, "E071"), ("8", "E071"), (True, "E071"), (2.0, "E071")])
def test_bad_partitions_are_refused(value, code):
    params = {"QUEUES": ["low"], "OPTIONS": {"QUEUE_OPTIONS": {"low": {"PARTITIONS": value}}}}
    assert code in [c for c, *_ in validate("default", params)]


@pytest.mark.parametrize("limit", [{"MAX_RUNNING": 2}, {"RATE_LIMIT": "10/s"}])
def test_partitions_with_a_fleet_wide_limit_are_refused(limit):
    params = {"QUEUES": ["low"], "OPTIONS": {"QUEUE_OPTIONS": {"low": {"PARTITIONS": 4, **limit}}}}
    assert [c for c, *_ in validate("default", params)] == ["E072"]
    params["OPTIONS"]["QUEUE_OPTIONS"]["low"]["PARTITIONS"] = 1  # one partition is today's queue: the limit is exact
    assert validate("default", params) == []


def test_strict_order_takes_turns_among_partitions():
    order = QueueOrder(["emails", "low"], None, {"low": 3})
    assert order.queues == ("emails", "low", "low~1", "low~2")
    firsts = [order.ranked()[1] for _ in range(6)]
    assert sorted(set(firsts)) == ["low", "low~1", "low~2"]  # every partition is tried first in turn
    assert all(r[0] == "emails" for r in (order.ranked() for _ in range(3)))  # the queue order holds
    weighted = QueueOrder(["emails", "low"], {"emails": 1, "low": 3}, {"low": 3})
    assert weighted.weights == {"emails": 1, "low": 1, "low~1": 1, "low~2": 1}  # the queue keeps its share
    assert weighted.describe() == "emails:1, low:3"


def test_a_thousand_tasks_spread_drain_once_and_read_as_one_queue(low, admin_client):
    backend = task_backends["default"]
    ids = [mark.using(queue_name="low").enqueue(f"k{i}").id for i in range(500)]
    ids += [res.id for res in backend.enqueue_many(mark.using(queue_name="low"), [((f"k{i}",), {}) for i in range(500, 1000)])]
    where = pending(low)
    assert sum(where.values()) == 1000 and all(n > 0 for n in where.values()), where  # all 8 partitions used
    assert max(where.values()) - min(where.values()) <= 2, where  # round-robin: even
    ins = Inspector(get_options())
    stats = {s.queue: s for s in ins.stats()}
    assert set(stats) == {"default", "emails", "low"} and stats["low"].pending == 1000
    figures = {f.queue: f for f in ins.figures()}
    assert set(figures) == {"default", "emails", "low"} and figures["low"].pending == 1000
    out = io.StringIO()
    call_command("redisq", "stats", "--json", stdout=out)
    assert {row["queue"]: row["pending"] for row in json.loads(out.getvalue())} == {"default": 0, "emails": 0, "low": 1000}
    out = io.StringIO()
    call_command("redisq", "queue", "list", "--json", stdout=out)
    assert {row["queue"]: row["pending"] for row in json.loads(out.getvalue())} == {"default": 0, "emails": 0, "low": 1000}
    from django.urls import reverse

    page = admin_client.get(reverse("admin:django_redisq_deadletter_queues"))
    ((_, rows, *_),) = page.context["backends"]
    assert {s.queue: s.pending for s, *_ in rows} == {"default": 0, "emails": 0, "low": 1000}
    assert backend.get_result(ids[3]).status == TaskResultStatus.READY
    assert backend.get_result(ids[3]).task.queue_name == "low"  # the logical queue, not the partition

    worker = Worker(["low"], burst=True, concurrency=4)
    assert sorted(worker.queues) == sorted(PHYSICAL) and worker.info()["queues"] == ["low"]
    assert worker.run() == 1000
    assert runs() == {f"k{i}": 1 for i in range(1000)}  # every task exactly once
    assert all(backend.get_result(i).status == TaskResultStatus.SUCCESSFUL for i in ids[::37])
    figures = {f.queue: f for f in ins.figures()}
    assert figures["low"].pending == 0 and figures["low"].totals["processed"] == 1000
    stats = {s.queue: s for s in ins.stats()}
    assert stats["low"].processed_hour == 1000 and sum(p for _, p, _, _ in stats["low"].series) == 1000


def test_an_idempotency_key_dedups_across_partitions(low):
    first = mark.using(queue_name="low", idempotency_key="order-42").enqueue("once")
    home = partitions.by_key("low", N, "order-42")
    for _ in range(2 * N):  # the round-robin counter moves on; the key still lands in its partition
        again = mark.using(queue_name="low", idempotency_key="order-42").enqueue("twice")
        mark.using(queue_name="low").enqueue("other")
        assert again.id == first.id
    assert low.llen(QueueKeys(home).pending) >= 1
    assert low.exists(QueueKeys(home).task(first.id)) == 1
    assert Worker(["low"], burst=True).run() == 1 + 2 * N
    assert runs()["once"] == 1 and "twice" not in runs()


async def _aenqueue_some() -> list[Any]:
    return [await mark.using(queue_name="low").aenqueue(f"a{i}") for i in range(16)]


def test_aenqueue_spreads_and_aget_result_finds_every_partition(low):
    import asyncio

    results = asyncio.run(_aenqueue_some())
    assert sum(1 for n in pending(low).values() if n) == N

    async def read() -> list[Any]:
        return [(await task_backends["default"].aget_result(res.id)).status for res in results]

    assert asyncio.run(read()) == [TaskResultStatus.READY] * 16


def test_a_dead_letter_replays_into_its_own_partition(low):
    for i in range(3):
        mark.using(queue_name="low").enqueue(f"pad{i}")  # the next task goes to partition 3
    bad = always_fails.using(queue_name="low").enqueue("never")
    home = next(q for q in PHYSICAL if low.exists(QueueKeys(q).task(bad.id)))
    assert home == "low~3"
    Worker(["low"], burst=True).run()
    ins = Inspector(get_options())
    assert ins.dead_counts() == {"default": 0, "emails": 0, "low": 1}
    assert ins.dead_queue_of([bad.id]) == {bad.id: home}
    assert {s.queue: s.dead for s in ins.stats()}["low"] == 1
    out = io.StringIO()
    call_command("redisq", "dead", "replay", bad.id, "--json", stdout=out)
    assert json.loads(out.getvalue())["by_queue"] == {home: 1}
    assert pending(low) == {q: int(q == home) for q in PHYSICAL}
    assert task_backends["default"].get_result(bad.id).status == TaskResultStatus.READY


def test_pause_and_resume_every_partition(low):
    out = io.StringIO()
    call_command("redisq", "queue", "pause", "low", stdout=out)
    assert all(low.exists(QueueKeys(q).paused) for q in PHYSICAL)
    assert {s.queue: s.paused for s in Inspector(get_options()).stats()}["low"] is True
    for i in range(N):
        mark.using(queue_name="low").enqueue(f"p{i}")
    assert Worker(["low"], burst=True).run() == 0  # a burst worker does not wait for a paused queue
    call_command("redisq", "queue", "resume", "low", stdout=out)
    assert not any(low.exists(QueueKeys(q).paused) for q in PHYSICAL)
    assert Worker(["low"], burst=True).run() == N


# -- dead letters of a partitioned queue: one merged list (store/reads/tasks.py's k-way merge) -------------

P4 = ["low", "low~1", "low~2", "low~3"]


def seed_spread(r: Any, n: int = 103) -> list[str]:
    """``n`` dead letters over 4 partitions, pairs dying in the same millisecond in different partitions;
    returns their ids in the order one queue holding them all lists them (newest first, ties by partition)."""
    from tests import helpers

    base = helpers.redis_ms(r) - 100_000
    entries = []
    for i in range(n):
        q, died = P4[i % 4], base + i // 2
        task = "tests.testapp.tasks.add" if i % 3 == 0 else "tests.testapp.tasks.mul"
        exc = "builtins.ValueError" if i % 5 == 0 else "builtins.KeyError"
        helpers.seed_hash(r, f"d{i:03}", "dead", q, died_at=died, failures=1, task=task, exc=exc, error=f"Boom {i}")
        r.zadd(QueueKeys(q).dead, {f"d{i:03}": died})
        entries.append((-died, i % 4, f"d{i:03}"))
    return [i for *_, i in sorted(entries)]


def walk(ins: Inspector, flt: Any, per_page: int) -> list[str]:
    seen: list[str] = []
    page = ins.dead_page("low", flt, per_page=per_page)
    while True:
        seen += [row.id for row in page.items]
        assert len(page.items) <= per_page
        if page.next_start is None:
            return seen
        page = ins.dead_page("low", flt, start=page.next_start, per_page=per_page, top=page.top)


def test_dead_letters_of_every_partition_list_in_died_at_order_across_pages(r):
    from django_redisq.ops.inspector import DeadFilter

    with partitioned(4):
        order = seed_spread(r)
        ins = Inspector(get_options())
        assert ins.dead_counts()["low"] == 103 and ins.count_dead("low") == 103
        assert walk(ins, DeadFilter(), 10) == order
        page = ins.dead_page("low", start=50, per_page=10)  # a page jumped to: located without walking from 0
        assert [row.id for row in page.items] == order[50:60] and page.total == 103 and page.next_start == 60
        assert {row.queue for row in page.items} == set(P4)  # each row names its partition: detail and replay go there
        back = ins.dead_page("low", per_page=10, before=60, top=page.top)
        assert back.start == 50 and [row.id for row in back.items] == order[50:60]
        assert ins.dead_page("low", per_page=10, before=5, top=page.top).start == 0
        last = ins.dead_page("low", start=100, per_page=10)
        assert [row.id for row in last.items] == order[100:] and last.next_start is None
        late = f"d{999}"  # dies after the snapshot: pages of that snapshot do not shift
        r.zadd(QueueKeys("low~2").dead, {late: float(page.top) + 5})
        assert [row.id for row in ins.dead_page("low", start=50, per_page=10, top=page.top).items] == order[50:60]


@pytest.mark.parametrize("flt", [{"task": "mul"}, {"exc": "ValueError"}, {"search": "boom 1"},
                                 {"task": "tests.testapp.tasks.add", "exc": "KeyError"}])
def test_filters_cover_every_partition(r, flt):
    from django_redisq.ops.inspector import DeadFilter
    from django_redisq.store.reads.dead_scan import matches

    with partitioned(4):
        order = seed_spread(r)
        f = DeadFilter(**flt)
        fields = {i: r.hmget(QueueKeys(P4[int(i[1:]) % 4]).task(i), "task", "exc", "error") for i in order}
        expected = [i for i in order if matches(i, fields[i], f.args())]
        assert 0 < len(expected) < len(order)
        ins = Inspector(get_options())
        assert walk(ins, f, 7) == expected
        assert ins.count_dead("low", f) == len(expected)
        second = ins.dead_page("low", f, per_page=7)
        second = ins.dead_page("low", f, start=second.next_start or 0, per_page=7, top=second.top)
        back = ins.dead_page("low", f, before=second.start, per_page=7, top=second.top)
        assert [row.id for row in back.items] == expected[:7] and back.start == 0


def test_redisq_dead_list_replay_and_purge_all_act_on_every_partition(r):
    with partitioned(4):
        connection.reset()
        order = seed_spread(r, 40)
        out = io.StringIO()
        call_command("redisq", "dead", "list", "--queue", "low", "--limit", "15", "--json", stdout=out)
        listed = json.loads(out.getvalue())
        assert listed["total"] == 40 and [row["id"] for row in listed["items"]] == order[:15]
        assert listed["next_start"] == 15
        out = io.StringIO()
        call_command("redisq", "dead", "list", "--queue", "low", "--limit", "50", "--start", "15", "--json", stdout=out)
        assert [row["id"] for row in json.loads(out.getvalue())["items"]] == order[15:]

        out = io.StringIO()
        call_command("redisq", "dead", "purge", "--all", "--queue", "low", "--exc", "ValueError", "--noinput", "--json", stdout=out)
        purged = [f"d{i:03}" for i in range(40) if i % 5 == 0]
        assert json.loads(out.getvalue())["done"] == len(purged) == 8
        assert not any(r.exists(QueueKeys(P4[int(i[1:]) % 4]).task(i)) for i in purged)
        assert sum(r.zcard(QueueKeys(q).dead) for q in P4) == 32

        out = io.StringIO()
        call_command("redisq", "dead", "replay", "--all", "--queue", "low", "--json", stdout=out)
        assert json.loads(out.getvalue())["done"] == 32
        assert sum(r.zcard(QueueKeys(q).dead) for q in P4) == 0
        for q in P4:  # each back in its own partition
            expect = {f"d{i:03}" for i in range(40) if P4[i % 4] == q and i % 5}
            assert set(r.lrange(QueueKeys(q).pending, 0, -1)) == expect
    connection.reset()


def test_the_admin_dead_letter_page_shows_every_partition(r, admin_client):
    from django.urls import reverse

    url = reverse("admin:django_redisq_deadletter_changelist")
    with partitioned(4):
        connection.reset()
        order = seed_spread(r, 103)
        first = admin_client.get(url, {"queue": "low"})
        page = first.context["page"]
        assert page.total == 103 and [row.id for row in page.items] == order[:50]
        assert first.context["queues"]["low"] == 103 and first.context["pages"] == [(1, 0), (2, 50), (3, 100)]
        html = first.content.decode()
        assert "/default/low~1/" in html and "/default/low~3/" in html  # detail links go to the partition
        third = admin_client.get(url, {"queue": "low", "start": 100, "top": page.top})
        assert [row.id for row in third.context["page"].items] == order[100:]
        newer = admin_client.get(url, {"queue": "low", "before": 100, "top": page.top})
        assert [row.id for row in newer.context["page"].items] == order[50:100]
        filtered = admin_client.get(url, {"queue": "low", "exc": "ValueError"})
        assert [row.id for row in filtered.context["page"].items] == [i for i in order if int(i[1:]) % 5 == 0]
        one = next(i for i in order if int(i[1:]) % 4 == 2)  # in partition 2
        home = "low~2"
        action = reverse("admin:django_redisq_deadletter_action")
        admin_client.post(action, {"queue": "low", "action": "replay", "ids": [one], "confirm": "yes"})
        assert r.zscore(QueueKeys(home).dead, one) is None and r.lrange(QueueKeys(home).pending, 0, -1) == [one]
        admin_client.post(action, {"queue": "low", "action": "delete", "scope": "all", "confirm": "yes"})
        assert sum(r.zcard(QueueKeys(q).dead) for q in P4) == 0
    connection.reset()
