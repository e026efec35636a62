"""Django's Tasks contract, field by field, as Django's own ``tests/tasks/`` check it.

Each test names the behaviour of Django's ``ImmediateBackend`` / ``DummyBackend``
(6.1) that a queued backend must share, so code written against the Tasks
framework cannot tell which backend it has. Where a reference backend can
run the same call, the test runs it there too and compares.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import pickle

import pytest
from django.test import override_settings

from django_redisq import InvalidArguments
from django_redisq.compat import (
    FRAMEWORK,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_redisq.task import RedisTask
from tests.helpers import drain, keys, run_in_thread
from tests.testapp import contract_tasks as ct
from tests.testapp import tasks

IMMEDIATE = {"default": {"BACKEND": f"{FRAMEWORK}.backends.immediate.ImmediateBackend"}}
TASK_FIELDS: dict = {"priority": 0, "backend": "default", "queue_name": "default", "run_after": None, "takes_context": False}
"""Every field a Task needs besides func: Django 6.0's have no defaults."""


def immediate_result(func, *args) -> TaskResult:  # type: ignore[no-untyped-def]
    """What Django's ImmediateBackend records for the same function."""
    with override_settings(TASKS=IMMEDIATE):
        from django_redisq.compat import Task

        return Task(func=func, **TASK_FIELDS).enqueue(*args)


# -- enqueue ----------------------------------------------------------------


def test_enqueue_returns_the_enqueued_at_that_get_result_returns(r):
    result = tasks.add.enqueue(1, 2)
    assert result.status == TaskResultStatus.READY and result.enqueued_at is not None
    assert result.enqueued_at.microsecond % 1000 == 0  # Redis time, in ms: what the script stored
    assert tasks.add.get_result(result.id).enqueued_at == result.enqueued_at
    before = result.enqueued_at
    result.refresh()
    assert result.enqueued_at == before


def test_enqueued_signal_sees_the_stored_enqueued_at(r):
    seen: list[TaskResult] = []

    def receiver(sender, task_result, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(task_result)

    task_enqueued.connect(receiver)
    try:
        result = tasks.add.enqueue(1, 2)
    finally:
        task_enqueued.disconnect(receiver)
    assert [s.enqueued_at for s in seen] == [tasks.add.get_result(result.id).enqueued_at]


def test_a_fresh_result_has_the_fields_dummy_backend_gives(r):
    result = tasks.add.enqueue(1, b=(2,))
    assert result.status == TaskResultStatus.READY and not result.is_finished
    assert result.started_at is None and result.finished_at is None and result.last_attempted_at is None
    assert result.args == [1] and result.kwargs == {"b": [2]}  # tuples become lists
    assert result.errors == [] and result.worker_ids == [] and result.attempts == 0
    assert result.backend == "default" and result.task == tasks.add and isinstance(result.id, str) and len(result.id) < 64
    with pytest.raises(ValueError, match="not finished"):
        result.return_value  # noqa: B018


def test_arguments_that_are_not_json_raise_type_error_as_django_does(r):
    with pytest.raises(TypeError):
        immediate_result(ct.ours_add.func, datetime.datetime.now(), 1)
    with pytest.raises(TypeError):
        tasks.add.enqueue(datetime.datetime.now(), 1)
    with pytest.raises(InvalidArguments):  # still ours, and still a ValueError as before
        tasks.add.enqueue(object(), 1)
    assert issubclass(InvalidArguments, ValueError)
    assert r.dbsize() == 0


# -- results ----------------------------------------------------------------


def test_a_return_value_that_is_not_json_fails_with_type_error_like_immediate_backend(r, make_worker):
    reference = immediate_result(ct.returns_datetime.func)
    result = ct.returns_datetime.enqueue()
    drain(make_worker, [result])
    assert result.status == reference.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == [e.exception_class_path for e in reference.errors] == ["builtins.TypeError"]
    assert result.errors[0].exception_class is TypeError
    assert result.attempts == 1  # not retried: the same value would come back
    assert r.hget(keys().task(result.id), "reason") == "not_retryable"


def test_a_return_value_is_normalised_for_signal_receivers_too(r, make_worker):
    seen = []

    def receiver(sender, task_result, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(task_result.return_value)

    task_finished.connect(receiver)
    try:
        result = ct.returns_tuple.enqueue()
        run_in_thread(make_worker())
    finally:
        task_finished.disconnect(receiver)
    assert seen == [immediate_result(ct.returns_tuple.func).return_value] == [[1, 2]]
    result.refresh()
    assert result.return_value == [1, 2]


def test_get_result_of_another_task_raises_mismatch(r):
    result = tasks.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        tasks.noop.get_result(result.id)
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result("missing")


def test_a_task_from_the_frameworks_decorator_and_one_from_ours_both_run(r, make_worker):
    assert isinstance(ct.framework_add, RedisTask)  # the backend's task_class
    results = [ct.framework_add.enqueue(1, 2), ct.ours_add.enqueue(3, 4)]
    drain(make_worker, results)
    assert [x.status for x in results] == [TaskResultStatus.SUCCESSFUL] * 2
    assert [x.return_value for x in results] == [3, 7]


def test_the_context_shows_the_first_attempt_as_immediate_backend_does(r, make_worker):
    result = ct.context_seen.enqueue()
    drain(make_worker, [result])
    assert result.return_value == {"attempt": 1, "status": "RUNNING", "workers": 1, "same_start": True}


# -- signals ----------------------------------------------------------------


def test_signals_carry_the_backend_class_and_only_the_task_result(r, make_worker):
    seen = []

    def receiver(signal, sender, **kwargs):  # type: ignore[no-untyped-def]
        seen.append((signal, sender, sorted(kwargs), kwargs["task_result"].status))

    signals = (task_enqueued, task_started, task_finished)
    for s in signals:
        s.connect(receiver)
    try:
        tasks.add.enqueue(1, 2)
        run_in_thread(make_worker())
    finally:
        for s in signals:
            s.disconnect(receiver)
    backend = type(task_backends["default"])
    assert seen == [
        (task_enqueued, backend, ["task_result"], TaskResultStatus.READY),
        (task_started, backend, ["task_result"], TaskResultStatus.RUNNING),
        (task_finished, backend, ["task_result"], TaskResultStatus.SUCCESSFUL),
    ]


# -- BaseException ----------------------------------------------------------


@pytest.mark.parametrize("task", [ct.raises_base, ct.araises_base], ids=["sync", "async"])
def test_two_base_exceptions_on_a_two_thread_worker_fail_their_attempts_and_the_worker_goes_on(r, make_worker, task):
    """Django's ImmediateBackend records any BaseException as the attempt's error; nothing ends our executors."""
    bad = [task.enqueue("keyboard"), task.enqueue("exit")]
    good = tasks.noop.enqueue_many([([i], {}) for i in range(10)])
    run_in_thread(make_worker(concurrency=2))
    for res, path in zip(bad, ["builtins.KeyboardInterrupt", "builtins.SystemExit"], strict=True):
        res.refresh()
        assert res.status == TaskResultStatus.FAILED and [e.exception_class_path for e in res.errors] == [path]
    assert all(tasks.noop.get_result(x.id).status == TaskResultStatus.SUCCESSFUL for x in good)


# -- async API and pickling -------------------------------------------------


def test_aenqueue_aget_result_and_arefresh(r, make_worker):
    async def enqueue() -> TaskResult:
        result = await tasks.add.aenqueue(2, 3)
        assert (await tasks.add.aget_result(result.id)).enqueued_at == result.enqueued_at
        return result

    result = asyncio.run(enqueue())
    assert result.status == TaskResultStatus.READY
    run_in_thread(make_worker())
    asyncio.run(result.arefresh())
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5


@pytest.mark.skipif(not hasattr(RedisTask, "_reconstruct"), reason="Tasks are picklable from Django 6.1 (not in the backport)")
def test_task_and_result_pickle_as_on_django_61(r, make_worker):
    task = tasks.flaky.using(max_retries=7, queue_name="default")
    assert pickle.loads(pickle.dumps(task)) == task
    result = tasks.add.enqueue(1, 2)
    run_in_thread(make_worker())
    result.refresh()
    back = pickle.loads(pickle.dumps(result))
    assert back.id == result.id and back.return_value == 3 and back.task == tasks.add and back.enqueued_at == result.enqueued_at


def test_get_result_returns_the_task_as_using_changed_it(r):
    """DummyBackend returns the enqueued Task itself; ours rebuilds it with the options using() changed."""
    task = tasks.add.using(max_retries=7, timeout=5)
    result = task.enqueue(1, 2)
    assert result.task == task and tasks.add.get_result(result.id).task == task


def test_using_passes_options_it_does_not_know_to_django(r):
    """``using(metadata=...)`` (Django's metadata proposal) behaves as the running Django's own ``Task.using``."""
    from django_redisq.compat import Task

    with override_settings(TASKS=IMMEDIATE):
        plain = Task(func=ct.ours_add.func, **TASK_FIELDS)
        try:
            expected: object = type(plain.using(metadata={"a": 1}).metadata)  # type: ignore[call-arg, attr-defined]
        except TypeError as exc:
            expected = type(exc)
    try:
        got: object = type(ct.ours_add.using(metadata={"a": 1}).metadata)  # type: ignore[attr-defined]
    except TypeError as exc:
        got = type(exc)
    assert got is expected


# -- Django's retry proposal (new-features #142) ------------------------------


def test_max_attempts_is_max_retries_plus_one_in_both_spellings(r):
    from django_redisq import task
    from django_redisq.compat import InvalidTask
    from django_redisq.compat import task as framework_task

    assert ct.attempts_three.max_attempts == 3 and ct.attempts_three.max_retries == 2
    if any(p.kind is p.VAR_KEYWORD for p in inspect.signature(framework_task).parameters.values()):
        assert framework_task(max_attempts=5)(ct.attempts_three.func).max_retries == 4  # the framework's @task too (not 6.0's)
    assert tasks.flaky.max_attempts == tasks.flaky.max_retries + 1
    changed = ct.attempts_three.using(max_retries=9)
    assert (changed.max_retries, changed.max_attempts) == (9, 10)
    assert ct.attempts_three.using(max_attempts=1).max_retries == 0
    with pytest.raises(InvalidTask, match="disagree"):
        task(max_attempts=3, max_retries=5)(ct.attempts_three.func)
    with pytest.raises(InvalidTask, match="max_attempts"):
        task(max_attempts=0)(ct.attempts_three.func)


def test_max_attempts_limits_the_attempts_on_the_worker(r, make_worker):
    result = ct.attempts_three.enqueue()
    drain(make_worker, [result])
    assert result.status == TaskResultStatus.FAILED and result.attempts == 3 and len(result.errors) == 3
