"""ops/operations.py: replay and delete, one by one and over every match, here or into another queue."""

from __future__ import annotations

import json

import pytest

from django_redisq.ops import operations
from django_redisq.ops.inspector import DeadFilter, Inspector, UnknownQueue
from django_redisq.ops.operations import DELETE, REPLAY, Operations, Progress
from django_redisq.settings.read import get_options
from tests import helpers
from tests.seed import seed_dead
from tests.testapp import tasks


@pytest.fixture
def ops(r) -> Operations:
    return Operations(Inspector(get_options("default")))


def where(r, task_id: str, queue: str = "default") -> list[str]:
    return helpers.where_is(r, task_id, queue)


def test_replay_and_delete_selected(r, ops, broker):
    a, b, c = seed_dead(broker, "default", 3)
    assert ops.act(REPLAY, "default", [a, "not-dead"]) == (1, 0)
    assert where(r, a) == ["pending"]
    assert r.hget(helpers.keys().task(a), "failures") == "0"
    assert ops.act(DELETE, "default", [b, c]) == (2, 0)
    assert where(r, b) == [] and not r.exists(helpers.keys().task(b))


def test_bad_requests_are_refused_before_anything_changes(r, ops, broker):
    [a] = seed_dead(broker, "default", 1)
    with pytest.raises(ValueError, match="unknown action"):
        ops.act("explode", "default", [a])
    with pytest.raises(UnknownQueue):
        ops.act(REPLAY, "gone", [a])
    with pytest.raises(UnknownQueue):
        ops.act(REPLAY, "default", [a], to="gone")
    with pytest.raises(ValueError, match="only a replay"):
        ops.act(DELETE, "default", [a], to="emails")
    assert where(r, a) == ["dead"]


def test_replay_into_another_queue_keeps_the_history_and_rewrites_the_message(r, ops, make_worker):
    result = tasks.always_fails.delay("first")
    helpers.drain(make_worker, [result])  # one burst run can leave with a retry still scheduled
    assert ops.act(REPLAY, "default", [result.id], to="low") == (1, 0)
    assert where(r, result.id) == [] and where(r, result.id, "low") == ["pending"]
    moved = r.hgetall(helpers.keys("low").task(result.id))
    assert json.loads(moved["msg"])["queue"] == "low" and json.loads(moved["msg"])["args"] == ["first"]
    assert (moved["failures"], moved["deliveries"], moved["replayed_from"]) == ("0", "0", "default")
    assert len(json.loads(moved["errors"])) == 2
    # fails twice more in its new queue, then is dead there: burst workers of "low" until it settled
    helpers.drain(lambda **kw: make_worker("low", **kw), [result])
    assert where(r, result.id, "low") == ["dead"]
    assert len(json.loads(r.hget(helpers.keys("low").task(result.id), "errors"))) == 4


def test_replay_into_another_queue_skips_a_message_that_does_not_decode(r, ops):
    helpers.seed_dead(r, "bad-1")
    r.hset(helpers.keys().task("bad-1"), "msg", "{nope")
    assert ops.act(REPLAY, "default", ["bad-1"], to="emails") == (0, 1)
    assert where(r, "bad-1") == ["dead"]


def test_an_interrupted_move_is_finished_by_the_next_one(r, ops, broker):
    [a] = seed_dead(broker, "default", 1)
    ops._replay_to("default", "emails", [a])
    helpers.seed_dead(r, a)  # as if the purge of the original had not happened
    assert ops.act(REPLAY, "default", [a], to="emails") == (1, 0)
    assert where(r, a) == [] and where(r, a, "emails") == ["pending"]
    assert r.llen(helpers.keys("emails").pending) == 1  # not queued twice


def test_act_matching_works_through_every_match_in_resumable_slices(r, ops, broker, monkeypatch):
    monkeypatch.setattr(operations, "BATCH", 7)

    def mix(i: int) -> tuple[str, str, str]:
        return ("shop.tasks.a", "builtins.KeyError", f"a {i}") if i % 2 else ("shop.tasks.b", "builtins.ValueError", f"b {i}")

    ids = seed_dead(broker, "default", 50, mix)
    flt = DeadFilter(task="a")
    progress = Progress(total=25)
    slices, seen = 0, []
    while not progress.finished:
        ops.act_matching(REPLAY, "default", flt, progress, deadline=0, on_batch=lambda p: seen.append(p.done))
        slices += 1
    assert progress.done == 25 and slices == 4 and seen == [7, 14, 21, 25]
    assert r.llen(helpers.keys().pending) == 25
    assert sorted(r.zrange(helpers.keys().dead, 0, -1)) == sorted(ids[0::2])


def test_act_matching_leaves_dead_letters_newer_than_the_snapshot(r, ops, broker):
    seed_dead(broker, "default", 10)
    [(_, newest)] = r.zrevrange(helpers.keys().dead, 0, 0, withscores=True)
    progress = Progress(top=str(int(newest)))
    r.zadd(helpers.keys().dead, {"newer": helpers.redis_ms(r) + 60_000})
    ops.act_matching(DELETE, "default", DeadFilter(), progress)
    assert progress.done == 10 and progress.finished
    assert r.zrange(helpers.keys().dead, 0, -1) == ["newer"]


def test_act_matching_counts_dead_letters_that_cannot_move_and_still_finishes(r, ops, broker):
    seed_dead(broker, "default", 3)
    helpers.seed_dead(r, "bad-1", died_at=helpers.redis_ms(r) - 1000)
    r.hset(helpers.keys().task("bad-1"), "msg", "[1]")
    progress = ops.act_matching(REPLAY, "default", DeadFilter(), Progress(), to="emails")
    assert (progress.done, progress.skipped, progress.finished) == (3, 1, True)
    assert r.llen(helpers.keys("emails").pending) == 3 and where(r, "bad-1") == ["dead"]


# -- a replay into another queue racing other operator actions (steps called in a chosen order) --

def move_steps(broker, task_id: str, to: str = "emails"):
    """The three steps of Operations._replay_to, to interleave by hand."""
    marked = broker.operator.move_out("default", to, [task_id])
    copies = [(i, f[0], f) for i, code, f in marked if code == 1]
    return marked, lambda: broker.operator.move_in(to, "default", copies), lambda: broker.operator.purge("default", [i for i, _, _ in copies])


def test_a_same_queue_replay_during_a_move_finds_it_no_longer_dead(r, broker):
    [a] = seed_dead(broker, "default", 1)
    [(_, code, _)], move_in, finish = move_steps(broker, a)
    assert code == 1
    assert broker.operator.replay("default", [a]) == 0  # marked moving: not taken here
    move_in()
    assert broker.operator.replay("default", [a]) == 0
    finish()
    assert where(r, a) == [] and where(r, a, "emails") == ["pending"]


def test_a_move_after_a_same_queue_replay_moves_nothing(r, ops, broker):
    [a] = seed_dead(broker, "default", 1)
    assert broker.operator.replay("default", [a]) == 1
    assert ops.act(REPLAY, "default", [a], to="emails") == (0, 0)
    assert where(r, a) == ["pending"] and where(r, a, "emails") == []


def test_two_moves_to_different_queues_move_it_once(r, broker):
    [a] = seed_dead(broker, "default", 1)
    [(_, first, _)], move_in, finish = move_steps(broker, a, "emails")
    [(_, second, _)], _, _ = move_steps(broker, a, "low")
    assert (first, second) == (1, -2)
    move_in()
    finish()
    assert where(r, a, "emails") == ["pending"] and where(r, a, "low") == [] and where(r, a) == []


def test_two_moves_to_the_same_queue_store_it_once(r, ops, broker):
    [a] = seed_dead(broker, "default", 1)
    _, move_in, finish = move_steps(broker, a)
    assert ops.act(REPLAY, "default", [a], to="emails") == (1, 0)  # the second one, start to end
    move_in()
    finish()
    assert where(r, a) == [] and where(r, a, "emails") == ["pending"]
    assert r.llen(helpers.keys("emails").pending) == 1


@pytest.mark.parametrize("crash_after", ["move_out", "move_in"])
def test_a_move_that_crashed_leaves_the_task_findable_and_the_next_move_finishes_it(r, ops, broker, crash_after):
    [a] = seed_dead(broker, "default", 1)
    _, move_in, _ = move_steps(broker, a)
    if crash_after == "move_in":
        move_in()
    assert where(r, a) == ["dead"] and r.hget(helpers.keys().task(a), "state") == "moving"
    assert ops.inspector.task("default", a) is not None
    assert ops.act(REPLAY, "default", [a], to="emails") == (1, 0)
    assert where(r, a) == [] and where(r, a, "emails") == ["pending"]
    assert r.llen(helpers.keys("emails").pending) == 1
