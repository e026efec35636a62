"""ops/inspector.py against a real Redis: figures, dead-letter pages and filters, task details."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from django_redisq.ops.inspector import DeadFilter, Inspector, UnknownQueue
from django_redisq.settings.read import get_options
from django_redisq.store.reads import tasks as inspect_tasks
from tests import helpers
from tests.seed import SEED_WORKER, seed_dead
from tests.testapp import tasks


@pytest.fixture
def ins(r) -> Inspector:
    return Inspector(get_options("default"))


def spread(r, queue: str, ids: list[str]) -> None:
    """Give seeded dead letters distinct died-at scores in seed order (an hour ago on), so newest-first is exact."""
    base = helpers.redis_ms(r) - 3_600_000
    r.zadd(helpers.keys(queue).dead, {i: base + n for n, i in enumerate(ids)})


def row(task: str, exc: str, msg: str):
    return lambda i: (task, exc, f"{msg} {i}")


# -- figures -----------------------------------------------------------


def test_stats_count_every_state_and_the_minute_counters(r, ins, make_worker):
    tasks.noop.delay(1)
    tasks.always_fails.delay("nope")
    assert make_worker().run() >= 2  # noop acked; always_fails retried once, then buried
    tasks.add.delay(1, 2)
    tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
    helpers.seed_processing(r, "run-1", "w1")
    helpers.seed_processing(r, "held-1", "w1")
    r.set(helpers.keys().running("w1"), json.dumps(["run-1"]))  # the worker's mark: run-1 runs, held-1 waits
    r.zadd(helpers.keys().workers, {"w1": helpers.redis_ms(r)})
    r.set(helpers.keys().worker_info("w1"), json.dumps({"host": "box", "pid": 42, "queues": ["default"],
                                                        "concurrency": 4, "current": ["run-1"]}))
    by_queue = {s.queue: s for s in ins.stats()}
    s = by_queue["default"]
    assert (s.pending, s.scheduled, s.running, s.held, s.dead) == (1, 1, 1, 1, 1)
    assert s.processed_hour == 1 and s.processed_minute == 1
    assert s.failed_hour == 2 and s.dead_hour == 1  # one retried attempt, one dead letter
    # the run's minute is the series' last, or the one before when the read came just after a minute turned (seen)
    assert len(s.series) == 60 and tuple(sum(e[i] for e in s.series[-2:]) for i in (1, 2, 3)) == (1, 1, 1)
    assert all(e[1:] == (0, 0, 0) for e in s.series[:-2])
    assert s.oldest_pending_age is not None and 0 <= s.oldest_pending_age < 60
    [w] = s.workers
    assert (w.name, w.host, w.pid, w.concurrency, w.holding, w.running, w.held, w.current, w.alive) == (
        "w1", "box", 42, 4, 2, 1, 1, ["run-1"], True)
    assert by_queue["emails"].pending == 0 and by_queue["emails"].oldest_pending_age is None


def test_a_silent_worker_is_listed_as_not_alive(r, ins):
    helpers.set_heartbeat_age(r, "old", 60_000)
    [w] = ins.stats()[0].workers
    assert w.name == "old" and not w.alive and w.seen_ago >= 59 and w.host == ""


# -- dead letters: pages -------------------------------------------------


def test_dead_page_is_newest_first_with_exact_page_boundaries(r, ins, broker):
    ids = seed_dead(broker, "default", 120)
    spread(r, "default", ids)
    newest_first = ids[::-1]
    p1 = ins.dead_page("default", per_page=50)
    assert [x.id for x in p1.items] == newest_first[:50]
    assert (p1.total, p1.num_pages, p1.number, p1.next_start, p1.has_previous) == (120, 3, 1, 50, False)
    p3 = ins.dead_page("default", start=100, per_page=50, top=p1.top)
    assert [x.id for x in p3.items] == newest_first[100:]
    assert (p3.number, p3.next_start, p3.has_previous) == (3, None, True)
    p2 = ins.dead_page("default", start=99, per_page=1, top=p1.top)  # the last row of page 2 exactly
    assert [x.id for x in p2.items] == [newest_first[99]] and p2.next_start == 100
    assert ins.dead_page("default", start=120, per_page=50).items == []
    assert p1.page_range() == [1, 2, 3]


def test_a_row_carries_what_the_list_shows(r, ins, broker):
    [i] = seed_dead(broker, "default", 1, row("shop.tasks.charge", "builtins.KeyError", "card declined"))
    [x] = ins.dead_page("default").items
    assert (x.id, x.task, x.exc, x.exc_name, x.error, x.state, x.reason) == (
        i, "shop.tasks.charge", "builtins.KeyError", "KeyError", "card declined 0", "dead", "failed")
    assert x.failures == 1 and x.deliveries == 1 and x.died_at is not None


def test_the_snapshot_keeps_positions_while_new_dead_letters_arrive(r, ins, broker):
    ids = seed_dead(broker, "default", 30)
    spread(r, "default", ids)
    p1 = ins.dead_page("default", per_page=10)
    later = seed_dead(broker, "default", 5, start=100)  # buried now: newer than the snapshot
    p2 = ins.dead_page("default", start=10, per_page=10, top=p1.top)
    assert [x.id for x in p2.items] == ids[::-1][10:20]
    assert p2.total == 30
    fresh = ins.dead_page("default", per_page=10)
    assert fresh.total == 35 and {x.id for x in fresh.items[:5]} == set(later)


def test_empty_queue_gives_an_empty_page(ins, r):
    page = ins.dead_page("default")
    assert (page.items, page.total, page.next_start, page.num_pages) == ([], 0, None, 1)


def test_unknown_queue_is_refused(ins, r):
    with pytest.raises(UnknownQueue, match="not in TASKS"):
        ins.dead_page("gone")
    with pytest.raises(UnknownQueue):
        Inspector.for_alias("nope")


# -- dead letters: filters -----------------------------------------------


@pytest.fixture
def mixed(r, broker) -> dict[str, list[str]]:
    """60 dead letters: every third is a KeyError in charge_card, the rest ValueErrors in send_receipt."""
    def mix(i: int) -> tuple[str, str, str]:
        if i % 3 == 0:
            return "shop.tasks.charge_card", "builtins.KeyError", f"Card DECLINED for order {i}"
        return "shop.tasks.send_receipt", "builtins.ValueError", f"smtp refused order {i}"
    ids = seed_dead(broker, "default", 60, mix)
    spread(r, "default", ids)
    newest = ids[::-1]
    return {"all": newest, "card": [i for n, i in enumerate(ids) if n % 3 == 0][::-1]}


@pytest.mark.parametrize("flt", [
    DeadFilter(task="charge_card"), DeadFilter(task="shop.tasks.charge_card"), DeadFilter(exc="KeyError"),
    DeadFilter(exc="builtins.KeyError"), DeadFilter(search="card declined"), DeadFilter(task="charge_card", exc="KeyError"),
])
def test_filters_match_a_full_path_or_its_tail_and_search_ignores_case(ins, mixed, flt):
    page = ins.dead_page("default", flt, per_page=100)
    assert [x.id for x in page.items] == mixed["card"]
    assert page.total is None and page.next_start is None


@pytest.mark.parametrize("flt", [DeadFilter(task="card"), DeadFilter(exc="Error"), DeadFilter(task="charge_card", exc="ValueError")])
def test_a_partial_name_is_not_a_match(ins, mixed, flt):
    assert ins.dead_page("default", flt).items == []


def test_search_finds_an_exact_task_id(ins, mixed):
    target = mixed["all"][7]
    assert [x.id for x in ins.dead_page("default", DeadFilter(search=target)).items] == [target]


def test_filtered_pages_walk_older_and_back_newer(ins, mixed):
    flt = DeadFilter(exc="KeyError")
    card = mixed["card"]
    p1 = ins.dead_page("default", flt, per_page=8)
    assert [x.id for x in p1.items] == card[:8] and p1.next_start is not None
    p2 = ins.dead_page("default", flt, start=p1.next_start, per_page=8, top=p1.top)
    assert [x.id for x in p2.items] == card[8:16]
    p3 = ins.dead_page("default", flt, start=p2.next_start, per_page=8, top=p1.top)
    assert [x.id for x in p3.items] == card[16:] and p3.next_start is None
    back = ins.dead_page("default", flt, before=p3.start, per_page=8, top=p1.top)
    assert [x.id for x in back.items] == card[8:16]
    first = ins.dead_page("default", flt, before=p2.start, per_page=8, top=p1.top)
    assert [x.id for x in first.items] == card[:8] and first.start == 0


def test_a_filtered_page_stops_at_its_budget_and_says_so(ins, mixed):
    page = ins.dead_page("default", DeadFilter(exc="KeyError"), per_page=50, budget=10)
    assert page.scanned == 10 and page.budget_hit
    assert [x.id for x in page.items] == [i for i in mixed["card"] if i in mixed["all"][:10]]
    more = ins.dead_page("default", DeadFilter(exc="KeyError"), start=page.next_start, per_page=50, top=page.top, budget=10)
    assert more.start == 10 and all(x.id in mixed["all"][10:20] for x in more.items) and more.items


def test_scan_walks_in_bounded_chunks(ins, mixed, monkeypatch):
    monkeypatch.setattr(inspect_tasks, "SCAN_CHUNK", 7)
    scan = ins.scan_dead("default", DeadFilter(task="send_receipt"), want=0, budget=None)
    assert (scan.examined, scan.matched, scan.exhausted, scan.found) == (60, 40, True, [])


def test_count_dead(ins, mixed):
    assert ins.count_dead("default") == 60
    assert ins.count_dead("default", DeadFilter(task="charge_card")) == 20
    assert ins.count_dead("default", DeadFilter(search="no such text")) == 0


def test_facets_count_tasks_and_exceptions_of_the_newest(ins, mixed):
    tasks_seen, excs = ins.facets("default", sample=30)
    assert tasks_seen == {"shop.tasks.send_receipt": 20, "shop.tasks.charge_card": 10}
    assert excs == {"builtins.ValueError": 20, "builtins.KeyError": 10}


def test_which_queue_holds_a_dead_letter(r, ins, broker):
    [a] = seed_dead(broker, "default", 1)
    [b] = seed_dead(broker, "emails", 1)
    assert ins.dead_queue_of([a, b, "nope"]) == {a: "default", b: "emails"}
    assert ins.present_dead("emails", [a, b]) == [b]
    assert ins.dead_counts() == {"default": 1, "emails": 1, "low": 0}


# -- task details and other lists ---------------------------------------


def test_detail_of_a_dead_letter_has_arguments_and_every_attempt(r, ins, make_worker):
    result = tasks.always_fails.delay("kaput")
    make_worker().run()
    d = ins.task("default", result.id)
    assert d.args == ["kaput"] and d.kwargs == {} and d.message_error == ""
    assert d.row.state == "dead" and d.row.failures == 2 and d.dead_score is not None
    assert [a.exc for a in d.attempts] == ["builtins.ValueError"] * 2
    assert all("raise ValueError(message)" in a.traceback and a.message == "kaput" and a.at for a in d.attempts)
    assert len(d.workers) == 2 and d.started_at is not None


def test_detail_of_an_undecodable_message_reports_it(r, ins):
    helpers.seed_dead(r, "bad-1")
    r.hset(helpers.keys().task("bad-1"), mapping={"msg": "{not json", "errors": "also not json"})
    d = ins.task("default", "bad-1")
    assert d.message_error.startswith("the stored message does not decode") and d.raw_message == "{not json"
    assert d.args is None and d.attempts[0].traceback == "also not json"


def test_detail_of_a_missing_task_is_none(ins, r):
    assert ins.task("default", "nope") is None


def test_scheduled_pending_and_running_pages(r, ins):
    for n in range(3):
        helpers.seed_scheduled(r, f"s{n}", due_in_ms=60_000 * (3 - n))
        helpers.seed_pending(r, f"p{n}")
    helpers.seed_processing(r, "run-1", "w1")
    helpers.seed_processing(r, "stale-1", "not-registered")
    r.zadd(helpers.keys().workers, {"w1": helpers.redis_ms(r)})
    sched = ins.scheduled_page("default", per_page=2)
    assert [x.id for x in sched.items] == ["s2", "s1"] and sched.total == 3 and sched.next_start == 2
    assert sched.items[0].due_at < sched.items[1].due_at
    assert [x.id for x in ins.scheduled_page("default", page=2, per_page=2).items] == ["s0"]
    assert [x.id for x in ins.pending_page("default").items] == ["p0", "p1", "p2"]  # next to run first
    running = ins.running_page("default")
    assert [(x.id, x.worker) for x in running.items] == [("run-1", "w1")] and running.total == 1


def test_seeded_dead_letters_went_through_the_engine(r, broker, ins):
    [i] = seed_dead(broker, "default", 1)
    assert r.llen(helpers.keys().processing(SEED_WORKER)) == 0
    assert int(r.get(helpers.keys().counter("dead_count"))) == 1
    assert ins.task("default", i).args == [0]


def test_detail_of_a_hash_with_unexpected_fields_still_renders(r, ins):
    r.hset(helpers.keys().task("odd-1"), mapping={"result": "1", "failures": "x"})
    d = ins.task("default", "odd-1")
    assert (d.row.state, d.row.failures, d.message_error, d.result, d.attempts) == ("", 0, "no message stored", "1", [])
