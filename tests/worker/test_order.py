"""Queue order (worker/fetching/queue_order.py), worker profiles (settings/profiles.py) and their checks; no worker runs here."""

from __future__ import annotations

import copy
from collections import Counter

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_redisq.settings.profiles import POOL_NAMES, get_profile, parse_queue_args
from django_redisq.settings.read import validate
from django_redisq.store.steps.replies import RUN, Delivery
from django_redisq.worker.fetching.held import Held
from django_redisq.worker.fetching.queue_order import QueueOrder
from django_redisq.worker.pools import POOLS

Q3 = ["emails", "default", "low"]
W = {"emails": 6, "default": 3, "low": 1}


def test_weights_on_the_command_line():
    assert parse_queue_args(["emails:6", "default:3", "low:1"]) == (Q3, W)
    assert parse_queue_args(["a", "b"]) == (["a", "b"], None)
    assert parse_queue_args([]) == ([], None)


@pytest.mark.parametrize(("args", "says"), [
    (["emails:0"], "from 1 to 1000"),
    (["emails:x"], "whole number"),
    (["emails:1.5"], "whole number"),
    (["emails:6", "default"], "give every queue a weight"),
    (["emails", "emails"], "named twice"),
    (["emails:2", "emails:3"], "named twice"),
    (["{bad}:3"], "not a queue name"),
])
def test_bad_weights_say_what_is_wrong(args, says):
    with pytest.raises(ValueError, match=says):
        parse_queue_args(args)


def test_strict_ranking_is_the_same_tuple_every_time():
    order = QueueOrder(Q3)
    assert order.ranked() is order.ranked() and list(order.ranked()) == Q3
    assert order.pick(["low", "default"]) == "default"


def shares(counts: Counter[str], n: int) -> dict[str, float]:
    return {q: counts[q] / n for q in Q3}


def test_the_first_of_a_weighted_ranking_among_any_subset_is_proportional_to_weight():
    """What lets an executor try queues in ranked() order: among the queues that have work, the first is picked by weight."""
    order, n = QueueOrder(Q3, W), 20_000
    first = Counter(order.ranked()[0] for _ in range(n))
    for q, want in (("emails", 0.6), ("default", 0.3), ("low", 0.1)):
        assert abs(first[q] / n - want) < 0.02, first  # 5+ standard deviations
    # only default and low have work: 3:1
    sub = Counter(next(q for q in order.ranked() if q != "emails") for _ in range(n))
    assert abs(sub["default"] / n - 0.75) < 0.02, sub


def test_the_held_buffer_serves_weighted_and_strict_order():
    """Held.next, the buffer layer: with tasks of every queue held, weighted picks by weight, strict the first queue."""
    def filled(order: QueueOrder) -> Held:
        held = Held(Q3, lambda: 10_000, order)
        for q in Q3:
            held.add(q, 2000, [Delivery(f"{q}{i}", q, RUN, "", 1, 0) for i in range(2000)])
        return held

    held, n = filled(QueueOrder(Q3, W)), 1500
    got = Counter(d.queue for d in (held.next() for _ in range(n)) if d)
    assert abs(got["emails"] / n - 0.6) < 0.06 and abs(got["default"] / n - 0.3) < 0.06 and abs(got["low"] / n - 0.1) < 0.05, got
    strict = filled(QueueOrder(Q3))
    assert {d.queue for d in (strict.next() for _ in range(n)) if d} == {"emails"}
    strict.block("emails")  # a paused queue is skipped
    assert strict.next().queue == "default"


def test_held_buffer_take_unstarted_hands_back_oldest_first_and_frees_the_budget():
    held = Held(["default"], lambda: 5)
    n = held.permits["default"].take(0)
    held.add("default", n, [Delivery(f"t{i}", "default", RUN, "", 1, 0) for i in range(3)])
    taken = held.next()
    assert held.take_unstarted("default") == ["t1", "t2", "t0"]  # t0 was taken but not begun: it goes too
    assert held.begin(taken, lambda: True) is False and len(held) == 0
    assert held.permits["default"].held == 0


# -- profiles and their checks ---------------------------------------------------


def tasks_with(**options) -> dict:
    tasks = copy.deepcopy(settings.TASKS)
    tasks["default"]["OPTIONS"].update(options)
    return tasks


def ids(options: dict) -> list[str]:
    return [cid for cid, _, _ in validate("default", tasks_with(**options)["default"])]


def test_a_good_profile_passes_the_checks_and_resolves():
    workers = {"web": {"QUEUES": W, "CONCURRENCY": 8, "POOL": "threads", "PREFETCH": 4}, "batch": {"QUEUES": ["low"]}}
    assert ids({"WORKERS": workers}) == []
    web = get_profile(workers, "web")
    assert web.queue_arg() == W and web.concurrency == 8 and web.prefetch == 4
    assert get_profile(workers, "batch").queue_arg() == ["low"]
    with pytest.raises(LookupError, match="profiles: batch, web"):
        get_profile(workers, "nope")


@pytest.mark.parametrize(("workers", "cid"), [
    (["web"], "E040"),
    ({"web": ["emails"]}, "E040"),
    ({"bad name": {"QUEUES": ["emails"]}}, "E041"),
    ({"web": {"QUEUES": ["emails"], "THREADS": 2}}, "E042"),
    ({"web": {}}, "E043"),
    ({"web": {"QUEUES": "emails"}}, "E043"),
    ({"web": {"QUEUES": ["emails", "nope"]}}, "E044"),
    ({"web": {"QUEUES": {"emails": 0}}}, "E045"),
    ({"web": {"QUEUES": {"emails": "6"}}}, "E045"),
    ({"web": {"QUEUES": ["emails"], "CONCURRENCY": 0}}, "E045"),
    ({"web": {"QUEUES": ["emails"], "POOL": "greenlets"}}, "E046"),
])
def test_bad_profiles_are_system_check_errors(workers, cid):
    assert cid in ids({"WORKERS": workers})


def test_worker_concurrency_is_a_per_queue_option():
    assert ids({"QUEUE_OPTIONS": {"emails": {"WORKER_CONCURRENCY": 2}}}) == []
    assert ids({"QUEUE_OPTIONS": {"emails": {"WORKER_CONCURRENCY": 0}}}) == ["E012"]
    assert ids({"QUEUE_OPTIONS": {"emails": {"WORKER_CONCURRENCY": 1.5}}}) == ["E012"]


def test_the_profile_knows_every_pool():
    assert POOL_NAMES == POOLS


@pytest.mark.parametrize(("args", "says"), [
    (["emails:6", "default"], "give every queue a weight"),
    (["emails:0"], "from 1 to 1000"),
    (["nope:3"], "'nope' is not in TASKS"),
    (["--profile", "nope"], "no worker profile 'nope'"),
    (["emails", "--profile", "web"], "give queues or --profile, not both"),
])
def test_bad_runworker_input_is_a_command_error(r, args, says):
    with override_settings(TASKS=tasks_with(WORKERS={"web": {"QUEUES": W}})), pytest.raises(CommandError, match=says):
        call_command("runworker", *args, "--burst")
