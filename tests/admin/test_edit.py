"""Edit a dead letter's arguments, then replay it: validation before any write, the atomic rewrite, the audit log."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.test import override_settings
from django.urls import reverse

from django_redisq.admin.edit import sha1
from tests import helpers
from tests.admin.test_site import changer, client_for, follow_post, staff, viewer  # noqa: F401 - fixtures
from tests.helpers import where_is
from tests.testapp import tasks

pytestmark = pytest.mark.django_db


def edit_url(task_id: str, queue: str = "default") -> str:
    return reverse("admin:django_redisq_deadletter_edit", args=["default", queue, task_id])


def detail_url(task_id: str, queue: str = "default") -> str:
    return reverse("admin:django_redisq_deadletter_detail", args=["default", queue, task_id])


@pytest.fixture
def dead(r, make_worker) -> str:
    """A real dead letter: flaky("edit-me", 4) failed four times (max_retries=3)."""
    result = tasks.flaky.delay("edit-me", 4)
    helpers.drain(make_worker, [result])  # one burst run can leave with a retry still scheduled
    assert helpers.where_is(r, result.id) == ["dead"]
    return result.id


def stored(r, task_id: str) -> dict:
    return r.hgetall(helpers.keys().task(task_id))


@pytest.fixture
def form(r, dead) -> dict:
    """The hidden field of the form: the SHA-1 of the message the edit starts from."""
    return {"sha": sha1(stored(r, dead)["msg"])}


def test_the_detail_page_offers_the_form_to_editors_only(r, admin_client, viewer, changer, dead, form):  # noqa: F811
    body = admin_client.get(detail_url(dead)).content.decode()
    assert 'id="redisq-edit-form"' in body and f'value="{form["sha"]}"' in body and "&quot;edit-me&quot;" in body
    for client in (viewer, changer):  # "change" replays and deletes; running a task with new arguments is "edit"
        assert 'id="redisq-edit-form"' not in client.get(detail_url(dead)).content.decode()
        assert client.post(edit_url(dead), {"args": '["x", 0]', "kwargs": "{}", "confirm": "yes", **form}).status_code == 403
    assert where_is(r, dead) == ["dead"] and json.loads(stored(r, dead)["msg"])["args"] == ["edit-me", 4]  # nothing written
    assert admin_client.get(edit_url(dead)).status_code == 405


def test_the_edit_permission_alone_beside_change_lets_a_staff_user_edit(r, dead, form):
    editor = client_for(staff("editor", "view_deadletter", "change_deadletter", "edit_deadletter"))
    assert 'id="redisq-edit-form"' in editor.get(detail_url(dead)).content.decode()
    response = editor.post(edit_url(dead), {"args": '["edited", 0]', "kwargs": "{}", "confirm": "yes", **form})
    assert response.status_code == 302 and where_is(r, dead) == ["pending"]
    assert json.loads(stored(r, dead)["msg"])["args"] == ["edited", 0]


@pytest.mark.parametrize(("args", "kwargs", "error"), [
    ('["a", 1', "{}", "Not valid JSON"),
    ('{"key": "a"}', "{}", "args must be a JSON list, not dict"),
    ("[]", "[1]", "kwargs must be a JSON object, not list"),
    ('["a"]', "{}", "do not fit tests.testapp.tasks.flaky(key, fail_times): missing a required argument: &#x27;fail_times&#x27;"),
    ('["a", 1]', '{"colour": "red"}', "got an unexpected keyword argument"),
    ('["a", 1, 2]', "{}", "too many positional arguments"),
    ('["a", NaN]', "{}", "must be JSON values"),
    ('["' + "x" * 2000 + '", 1]', "{}", "the limit is 1000 (OPTIONS[&#x27;MAX_MESSAGE_BYTES&#x27;])"),
])
def test_bad_input_is_refused_with_a_clear_error_and_nothing_is_written(r, admin_client, dead, form, args, kwargs, error, settings):
    options = {**settings.TASKS["default"].get("OPTIONS", {}), "MAX_MESSAGE_BYTES": 1000}
    with override_settings(TASKS={**settings.TASKS, "default": {**settings.TASKS["default"], "OPTIONS": options}}):
        before = stored(r, dead)
        response = admin_client.post(edit_url(dead), {"args": args, "kwargs": kwargs, **form})
        assert response.status_code == 200 and 'id="redisq-edit" open' in response.content.decode()
        assert error in response.content.decode()
        assert stored(r, dead) == before and helpers.where_is(r, dead) == ["dead"] and not LogEntry.objects.exists()


def test_a_task_this_process_does_not_know_is_refused(r, admin_client, broker):
    helpers.seed_dead(r, "ghost")
    r.hset(helpers.keys().task("ghost"), "task", "shop.tasks.gone")
    msg = r.hget(helpers.keys().task("ghost"), "msg")
    response = admin_client.post(edit_url("ghost"), {"args": "[]", "kwargs": "{}", "sha": sha1(msg)})
    assert "is not registered in this process" in response.content.decode()
    assert helpers.where_is(r, "ghost") == ["dead"]


def test_edit_confirms_then_replays_with_the_new_arguments_and_logs_the_old(r, admin_client, admin_user, dead, form, make_worker):
    confirm = admin_client.post(edit_url(dead), {"args": '["edited", 0]', "kwargs": "{}", **form})
    body = confirm.content.decode()
    assert confirm.status_code == 200 and 'id="redisq-yes"' in body and "&quot;edit-me&quot;" in body and "&quot;edited&quot;" in body
    assert helpers.where_is(r, dead) == ["dead"] and not LogEntry.objects.exists()  # nothing yet
    _, messages = follow_post(admin_client, edit_url(dead), {**dict(confirm.context["fields"])})
    assert messages == [f"Replayed task {dead} with the edited arguments; the original ones are in the admin log."]
    data = stored(r, dead)
    assert helpers.where_is(r, dead) == ["pending"] and (data["edited"], data["replayed"], data["failures"]) == ("1", "1", "0")
    assert json.loads(data["msg"])["args"] == ["edited", 0]
    [entry] = LogEntry.objects.all()
    assert (entry.user, entry.action_flag, entry.object_id) == (admin_user, CHANGE, f"default/default/{dead}")
    assert entry.change_message.endswith('the original arguments were {"args":["edit-me",4],"kwargs":{}}')
    make_worker().run()
    assert tasks.flaky.get_result(dead).return_value == "ok after 1"  # ran with key "edited": its first run


def test_an_edit_never_overwrites_arguments_that_changed_meanwhile(r, admin_client, dead, form):
    r.hset(helpers.keys().task(dead), "msg", json.dumps({"v": 1, "args": ["someone-else", 0], "kwargs": {}}))
    _, messages = follow_post(admin_client, edit_url(dead), {"args": '["mine", 0]', "kwargs": "{}", "confirm": "yes", **form})
    assert messages[0].startswith("The arguments of this dead letter changed since you started editing")
    assert json.loads(stored(r, dead)["msg"])["args"] == ["someone-else", 0] and helpers.where_is(r, dead) == ["dead"]


def test_the_script_refuses_a_stale_hash_or_a_task_no_longer_dead(r, broker, dead):
    from django_redisq.exceptions import MessageChanged, TaskNotFound

    msg = stored(r, dead)["msg"]
    with pytest.raises(MessageChanged):
        broker.operator.edit_replay("default", dead, sha1(msg + " "), "{}")
    assert stored(r, dead)["msg"] == msg
    broker.operator.replay("default", [dead])
    with pytest.raises(TaskNotFound):
        broker.operator.edit_replay("default", dead, sha1(msg), '{"v":1,"args":[],"kwargs":{}}')
    assert stored(r, dead)["msg"] == msg


def test_options_and_metadata_of_the_call_are_kept(r, admin_client, make_worker):
    result = tasks.flaky.using(priority=0).delay("keep", 4)
    make_worker().run()
    r.hset(helpers.keys().task(result.id), "msg", json.dumps({"v": 1, "args": ["keep", 4], "kwargs": {}, "o": {"max_retries": 0}}))
    msg = stored(r, result.id)["msg"]
    confirm = admin_client.post(edit_url(result.id), {"args": "[]", "kwargs": '{"key": "k2", "fail_times": 0}', "sha": sha1(msg)})
    follow_post(admin_client, edit_url(result.id), dict(confirm.context["fields"]))
    assert json.loads(stored(r, result.id)["msg"]) == {"v": 1, "args": [], "kwargs": {"key": "k2", "fail_times": 0}, "o": {"max_retries": 0}}
