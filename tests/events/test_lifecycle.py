"""LIFECYCLE_EVENTS: every task's transitions published to redisq.tasks, and nothing when off."""

from __future__ import annotations

from django.core.checks import run_checks

from django_redisq.events.subscriptions import LIFECYCLE_TOPIC
from django_redisq.store.keys import TopicKeys
from tests.events.conftest import H, events_settings
from tests.helpers import wait_for
from tests.testapp.tasks import add, always_fails

WATCH = {"watch": {"topic": LIFECYCLE_TOPIC, "task": H + "lifecycle_log"}}


def _states(r) -> dict[str, list[str]]:
    """task id -> its states in the order they were published (the stream's), whatever order the watcher ran them in."""
    found: dict[str, list[str]] = {}
    rows = [entry.split("|", 3) for entry in r.lrange("events:lifecycle", 0, -1)]
    for _, task_id, state, _ in sorted(rows, key=lambda row: tuple(int(x) for x in row[0].split("-"))):
        found.setdefault(task_id, []).append(state)
    return found


def test_each_transition_becomes_an_event_once_and_the_watchers_own_tasks_none(r, running_worker):
    with events_settings(WATCH, LIFECYCLE_EVENTS=True):
        ok = add.enqueue(1, 2)
        bad = always_fails.enqueue("boom")
        running_worker()
        assert wait_for(lambda: len(_states(r).get(bad.id, [])) == 7 and len(_states(r).get(ok.id, [])) == 3, 30), _states(r)
        states = _states(r)
        assert states[ok.id] == ["enqueued", "started", "succeeded"]
        # the first attempt's "retried" and the second's "started" come from two threads: their order is not fixed
        assert states[bad.id][:3] == ["enqueued", "started", "failed"] and states[bad.id][-2:] == ["failed", "dead_lettered"]
        assert sorted(states[bad.id][3:5]) == ["retried", "started"]
        assert set(states) == {ok.id, bad.id}  # the watcher's own tasks published nothing: no feedback
        stream = r.xlen(TopicKeys(LIFECYCLE_TOPIC).stream)
        assert stream == 10


def test_off_by_default_and_a_bad_value_is_a_check_error(r, make_worker):
    with events_settings(WATCH):
        add.enqueue(1, 2)
        make_worker("default").run()
        assert r.exists(TopicKeys(LIFECYCLE_TOPIC).stream) == 0 or r.xlen(TopicKeys(LIFECYCLE_TOPIC).stream) == 0
    with events_settings(LIFECYCLE_EVENTS="yes"):
        assert [e.id for e in run_checks() if e.id.startswith("django_redisq.E1")] == ["django_redisq.E108"]
