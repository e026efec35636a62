"""Cancelling from Python (``django_redisq.cancel``, the backend) and from a shell (``redisq cancel``)."""

from __future__ import annotations

import copy
import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

import django_redisq
from django_redisq import TaskCancelled
from django_redisq.compat import FRAMEWORK, InvalidTaskBackend, TaskResultStatus, task_backends
from django_redisq.exceptions import TaskNotFound
from tests import helpers
from tests.testapp import tasks

EXC = "django_redisq.exceptions.TaskCancelled"


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("redisq", "cancel", *args, stdout=out, stderr=io.StringIO())  # "--": ids may start with "-"
    return out.getvalue()


def running(r, task_id: str = "run-1", worker: str = "w1", queue: str = "default") -> str:
    helpers.seed_processing(r, task_id, worker, queue=queue)
    r.zadd(helpers.keys(queue).workers, {worker: helpers.redis_ms(r)})
    return task_id


# -- the Python API ---------------------------------------------------------

def test_the_public_api_exports_cancel_and_the_exception():
    assert "cancel" in django_redisq.__all__ and "TaskCancelled" in django_redisq.__all__
    assert issubclass(TaskCancelled, BaseException) and not issubclass(TaskCancelled, Exception)


def test_cancel_a_pending_task_by_its_result(r):
    result = tasks.add.enqueue(1, 2)
    assert django_redisq.cancel(result) == "cancelled"
    assert helpers.where_is(r, result.id) == ["dead"]
    got = task_backends["default"].get_result(result.id)
    assert got.status == TaskResultStatus.FAILED
    assert got.errors[-1].exception_class_path == EXC and "cancelled by api" in got.errors[-1].traceback
    assert r.hget(helpers.keys().task(result.id), "reason") == "cancelled"


def test_cancel_a_scheduled_task_on_another_queue_by_id(r):
    result = tasks.counted.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("k")  # queue "emails"
    assert django_redisq.cancel(result.id, who="shop:refund") == "cancelled"
    assert helpers.where_is(r, result.id, "emails") == ["dead"]
    assert r.hget(helpers.keys("emails").task(result.id), "error") == "cancelled by shop:refund"


def test_cancel_a_running_task_records_a_request(r, broker):
    task_id = running(r)
    assert django_redisq.cancel(task_id) == "requested"
    assert broker.operator.cancel_requests("default") == {task_id: "api"}
    assert helpers.where_is(r, task_id) == ["processing:w1"]


def test_cancel_a_finished_task_changes_nothing(r, make_worker):
    result = tasks.add.enqueue(2, 3)
    make_worker().run()
    assert django_redisq.cancel(result) == "finished"
    got = task_backends["default"].get_result(result.id)
    assert got.status == TaskResultStatus.SUCCESSFUL and got.return_value == 5


def test_a_cancelled_task_is_never_run_by_a_worker(r, make_worker):
    result = tasks.charge.enqueue(7)
    django_redisq.cancel(result)
    make_worker().run()
    assert task_backends["default"].get_result(result.id).status == TaskResultStatus.FAILED


@pytest.mark.parametrize("task_id", ["nope", "", "x" * 65])
def test_an_unknown_id_raises_task_not_found(r, task_id):
    with pytest.raises(TaskNotFound):
        django_redisq.cancel(task_id)


def test_the_backend_method(r):
    result = tasks.add.enqueue(1, 1)
    assert task_backends["default"].cancel(result.id, who="test") == "cancelled"
    assert r.hget(helpers.keys().task(result.id), "error") == "cancelled by test"


def test_a_backend_that_is_not_ours_is_refused(r, settings):
    setting = copy.deepcopy(settings.TASKS)
    setting["plain"] = {"BACKEND": f"{FRAMEWORK}.backends.dummy.DummyBackend"}
    with override_settings(TASKS=setting), pytest.raises(InvalidTaskBackend, match="not a django_redisq backend"):
        django_redisq.cancel("some-id", backend="plain")


# -- manage.py redisq cancel --------------------------------------------------

def rows(text: str) -> list[list[str]]:
    """The table's rows under its header row (TASK ID, OUTCOME), each split into its cells."""
    header, *lines = text.splitlines()
    assert header.split() == ["TASK", "ID", "OUTCOME"], header
    return [line.split() for line in lines]


def test_the_command_prints_one_line_per_id(r):
    pending = tasks.add.enqueue(1, 2).id
    scheduled = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2).id
    task_id = running(r)
    lines = rows(run("--", pending, scheduled, task_id))
    assert lines == [[pending, "cancelled"], [scheduled, "cancelled"], [task_id, "requested"]]
    assert r.hget(helpers.keys().task(pending), "error") == "cancelled by cli"


def test_the_command_as_json(r, make_worker):
    done = tasks.add.enqueue(1, 2).id
    make_worker().run()
    waiting = tasks.add.enqueue(1, 2).id
    out = io.StringIO()
    call_command("redisq", "cancel", "--json", "--", done, waiting, stdout=out)
    assert json.loads(out.getvalue()) == {done: "finished", waiting: "cancelled"}


def test_a_missing_id_is_an_error_after_the_others_are_cancelled(r):
    waiting = tasks.add.enqueue(1, 2).id
    out = io.StringIO()
    with pytest.raises(CommandError, match="no such task in any configured queue: nope"):
        call_command("redisq", "cancel", "--", waiting, "nope", stdout=out)
    assert rows(out.getvalue()) == [[waiting, "cancelled"], ["nope", "missing"]]
    assert helpers.where_is(r, waiting) == ["dead"]


def test_the_command_with_a_queue(r):
    waiting = tasks.counted.enqueue("k").id  # on "emails"
    with pytest.raises(CommandError, match="no such task in queue default"):
        run("--queue", "default", "--", waiting)
    assert helpers.where_is(r, waiting, "emails") == ["pending"]
    assert rows(run("--queue", "emails", "--", waiting)) == [[waiting, "cancelled"]]


@pytest.mark.parametrize(("args", "message"), [
    (["--queue", "nosuch", "abc"], "queue 'nosuch' is not in"),
    (["bad id!"], "not task ids"),
    (["x" * 65], "not task ids"),
])
def test_bad_input_is_a_clear_error(r, args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert r.dbsize() == 0


def test_an_id_starting_with_a_dash_after_a_double_dash(r):
    helpers.seed_pending(r, "-starts-with-a-dash")  # ids are URL-safe base64: one in 32 starts with '-'
    assert rows(run("--", "-starts-with-a-dash")) == [["-starts-with-a-dash", "cancelled"]]


def test_ids_are_required(r):
    with pytest.raises(CommandError, match="ID"):
        call_command("redisq", "cancel", stdout=io.StringIO(), stderr=io.StringIO())
