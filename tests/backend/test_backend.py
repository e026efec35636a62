import json

import pytest

from django_redisq.backend import STATE_TO_STATUS, RedisQueueBackend
from django_redisq.compat import FRAMEWORK, InvalidTask, TaskResultDoesNotExist, TaskResultStatus, task_backends, task_enqueued, task_finished, task_started
from tests.helpers import keys
from tests.testapp import tasks


def test_flags_are_honest():
    b = task_backends["default"]
    assert isinstance(b, RedisQueueBackend)
    assert b.supports_defer and b.supports_get_result and b.supports_async_task
    assert b.supports_priority  # tests/store/test_priority.py


def test_find_backend_tells_ours_from_others_without_building_anything(settings):
    """The port's lookup reads one class attribute: it builds no options and no connection to answer."""
    import copy

    from django.test import override_settings

    from django_redisq.workflows.port import find_backend

    setting = copy.deepcopy(settings.TASKS)
    setting["plain"] = {"BACKEND": f"{FRAMEWORK}.backends.dummy.DummyBackend"}
    setting["fresh"] = {**setting["default"]}
    with override_settings(TASKS=setting):
        fresh = task_backends["fresh"]
        assert find_backend("fresh") is fresh
        assert not {"conf", "broker", "abroker", "workflows"} & set(vars(fresh))
        assert find_backend("plain") is None


def test_status_table_covers_every_state():
    from django_redisq.store.keys import STATES

    assert set(STATE_TO_STATUS) == set(STATES)


def test_get_result_unknown_id(r):
    with pytest.raises(TaskResultDoesNotExist):
        tasks.noop.get_result("x" * 32)
    with pytest.raises(TaskResultDoesNotExist):
        tasks.noop.get_result("x" * 100)


def test_result_lifecycle(r, make_worker):
    result = tasks.add.delay(1, 2)
    fresh = tasks.add.get_result(result.id)
    assert fresh.status == TaskResultStatus.READY and fresh.args == [1, 2] and fresh.enqueued_at
    make_worker().run()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
    assert result.started_at and result.finished_at and result.last_attempted_at
    assert len(result.worker_ids) == 1 and result.attempts == 1 and result.errors == []


def test_failed_result_has_every_error(r, make_worker):
    result = tasks.always_fails.delay("bad thing")
    for _ in range(20):
        make_worker().run()
        result.refresh()
        if result.is_finished:
            break
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 2 and result.attempts == 2  # max_retries=1: two attempts
    assert result.errors[0].exception_class_path == "builtins.ValueError"
    assert "bad thing" in result.errors[-1].traceback
    assert result.errors[0].exception_class is ValueError
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018


def test_signals_are_sent(r, make_worker):
    seen = []

    def on(signal_name):
        def receiver(sender, task_result, **kw):
            seen.append((signal_name, task_result.status))
        return receiver

    receivers = [on("enqueued"), on("started"), on("finished")]
    task_enqueued.connect(receivers[0])
    task_started.connect(receivers[1])
    task_finished.connect(receivers[2])
    try:
        tasks.noop.delay(1)
        make_worker().run()
    finally:
        task_enqueued.disconnect(receivers[0])
        task_started.disconnect(receivers[1])
        task_finished.disconnect(receivers[2])
    assert seen == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]


def test_retry_sends_finished_with_ready(r, make_worker):
    seen = []

    def receiver(sender, task_result, **kw):
        seen.append(task_result.status)

    task_finished.connect(receiver)
    try:
        tasks.flaky.delay("k", 1)
        for _ in range(20):
            make_worker().run()
            if "SUCCESSFUL" in seen:
                break
    finally:
        task_finished.disconnect(receiver)
    assert seen == ["READY", "SUCCESSFUL"]


def test_takes_context(r, make_worker):
    result = tasks.takes_context.delay(5)
    make_worker().run()
    result.refresh()
    assert result.return_value == {"attempt": 1, "id": result.id, "x": 5}


def test_result_of_a_running_task(r, broker):
    result = tasks.noop.delay(1)
    broker.heartbeat(["default"], "w1", {})
    broker.fetch("default", "w1", 1)
    assert tasks.noop.get_result(result.id).status == TaskResultStatus.RUNNING


def test_async_enqueue_and_get_result(r):
    from asgiref.sync import async_to_sync

    result = async_to_sync(tasks.noop.aenqueue)(3)
    again = async_to_sync(tasks.noop.aget_result)(result.id)
    assert again.id == result.id and again.args == [3]


def test_stored_message_is_compact_json(r):
    result = tasks.add.delay(1, 2)
    data = r.hgetall(keys().task(result.id))
    assert json.loads(data["msg"]) == {"v": 1, "args": [1, 2], "kwargs": {}}
    assert data["task"] == "tests.testapp.tasks.add"
    assert r.object("encoding", keys().task(result.id)) == "listpack"  # every field at most 64 bytes


def test_task_ids_never_start_with_a_dash_so_commands_never_take_one_for_an_option(r):
    from tests.testapp import tasks as test_tasks

    ids = [res.id for res in test_tasks.noop.enqueue_many([([i], {}) for i in range(2000)])]
    assert not [i for i in ids if i.startswith("-")]  # one in 64 would, at random
    assert all(len(i) == 32 for i in ids) and len(set(ids)) == len(ids)


def test_a_task_object_is_validated_once_and_a_refused_one_on_every_call(r, monkeypatch):
    backend = task_backends["default"]
    calls: list[object] = []
    refuse: list[object] = []
    check = type(backend).validate_task

    def counting(self, task):  # type: ignore[no-untyped-def]
        calls.append(task)
        if any(task is x for x in refuse):
            raise InvalidTask("refused for the test")
        return check(self, task)

    monkeypatch.setattr(type(backend), "validate_task", counting)
    backend._valid.clear()
    for i in range(5):
        tasks.add.enqueue(i, i)
    assert calls == [tasks.add]  # the module-level task: once
    other = tasks.add.using(priority=5)  # Django validates a new Task object when it is made
    other.enqueue(1, 1)
    other.enqueue(1, 1)
    assert calls == [tasks.add, other, other]
    refuse.append(other)
    backend._valid.clear()
    for _ in range(2):
        with pytest.raises(InvalidTask):
            other.enqueue(1, 1)
    assert len(calls) == 5  # refused each time, never remembered
