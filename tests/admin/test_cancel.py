"""The task lists' cancel action in the admin: permissions, POST and CSRF, confirmation, outcomes, log."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse
from django.utils import timezone

from tests import helpers
from tests.admin.test_site import client_for, follow_post, staff, tasks_url
from tests.testapp import tasks

pytestmark = pytest.mark.django_db

CANCEL = reverse("admin:django_redisq_deadletter_cancel")
EXC = "django_redisq.exceptions.TaskCancelled"


@pytest.fixture(autouse=True)
def fast_passwords(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def running(r, task_id: str = "run-1", worker: str = "w1") -> str:
    helpers.seed_processing(r, task_id, worker)
    r.zadd(helpers.keys().workers, {worker: helpers.redis_ms(r)})
    return task_id


def post(state: str, ids: list[str], confirm: bool = True, **extra: str) -> dict:
    data: dict = {"backend": "default", "queue": "default", "state": state, "ids": ids, **extra}
    if confirm:
        data["confirm"] = "yes"
    return data


@pytest.mark.parametrize("state", ["pending", "scheduled", "running"])
def test_every_task_list_offers_the_action_to_changers_only(r, admin_client, state):
    {"pending": lambda: helpers.seed_pending(r, "p1"), "scheduled": lambda: helpers.seed_scheduled(r, "p1", 60_000),
     "running": lambda: running(r, "p1")}[state]()
    page = admin_client.get(tasks_url(state)).content.decode()
    assert CANCEL in page and 'name="ids" value="p1"' in page and "redisq-cancel-selected" in page
    viewer = client_for(staff("viewer", "view_deadletter"))
    page = viewer.get(tasks_url(state)).content.decode()
    assert "p1" in page and CANCEL not in page and 'name="ids"' not in page


def test_confirm_first_then_cancel_pending_and_log(r, admin_client, admin_user):
    task_id = tasks.add.enqueue(1, 2).id
    confirm = admin_client.post(CANCEL, post("pending", [task_id], confirm=False))
    assert confirm.status_code == 200 and confirm.context["count"] == 1
    assert [row.id for row in confirm.context["sample"]] == [task_id] and 'id="redisq-yes"' in confirm.content.decode()
    assert helpers.where_is(r, task_id) == ["pending"] and not LogEntry.objects.exists()
    response, messages = follow_post(admin_client, CANCEL, post("pending", [task_id]))
    assert messages == ["Cancelled 1 task: now dead letters with reason “cancelled”."]
    assert response.redirect_chain[-1][0] == tasks_url("pending") + "?backend=default&queue=default"
    assert helpers.where_is(r, task_id) == ["dead"]
    data = r.hgetall(helpers.keys().task(task_id))
    assert data["reason"] == "cancelled" and data["exc"] == EXC and data["error"] == "cancelled by admin:admin"
    [entry] = LogEntry.objects.all()
    assert (entry.user, entry.action_flag, entry.object_id) == (admin_user, CHANGE, f"default/default/{task_id}")
    assert entry.change_message.startswith("Cancelled task")


def test_a_mixed_selection_reports_each_outcome(r, admin_client, broker, make_worker):
    done = tasks.add.enqueue(1, 1).id
    make_worker().run()
    waiting = [tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, i).id for i in range(2)]
    task_id = running(r)
    _, messages = follow_post(admin_client, CANCEL, post("scheduled", [*waiting, task_id, done, "gone"]))
    assert messages == [
        "Cancelled 2 tasks: now dead letters with reason “cancelled”.",
        "Asked the workers to stop 1 running task: within about a second they show as dead letters with reason “cancelled”.",
        "1 task had already finished; nothing changed.",
        "1 task was not found (result expired?); nothing changed.",
    ]
    assert broker.operator.cancel_requests("default") == {task_id: "admin:admin"}
    assert sorted(e.object_id for e in LogEntry.objects.all()) == sorted(f"default/default/{i}" for i in [*waiting, task_id])


def test_viewers_cannot_cancel(r, db):
    task_id = tasks.add.enqueue(1, 2).id
    viewer = client_for(staff("viewer", "view_deadletter"))
    assert viewer.post(CANCEL, post("pending", [task_id])).status_code == 403
    assert helpers.where_is(r, task_id) == ["pending"]


def test_the_change_permission_alone_is_enough(r, db):
    task_id = tasks.add.enqueue(1, 2).id
    changer = client_for(staff("changer", "change_deadletter"))
    _, messages = follow_post(changer, CANCEL, post("pending", [task_id]))
    assert messages == ["Cancelled 1 task: now dead letters with reason “cancelled”."]


def test_post_only_and_csrf(r, admin_user):
    task_id = tasks.add.enqueue(1, 2).id
    strict = client_for(admin_user, enforce_csrf_checks=True)
    assert strict.get(CANCEL).status_code == 405
    assert strict.post(CANCEL, post("pending", [task_id])).status_code == 403
    assert helpers.where_is(r, task_id) == ["pending"]
    strict.get(tasks_url("pending"))  # sets the CSRF cookie, as a browser visit does
    token = strict.cookies[settings.CSRF_COOKIE_NAME].value
    assert strict.post(CANCEL, {**post("pending", [task_id]), "csrfmiddlewaretoken": token}).status_code == 302
    assert helpers.where_is(r, task_id) == ["dead"]


def test_nothing_selected_and_bad_input(r, admin_client):
    _, messages = follow_post(admin_client, CANCEL, post("pending", []))
    assert messages == ["No tasks were selected; nothing was cancelled."]
    _, messages = follow_post(admin_client, CANCEL, post("pending", ["bad id!", "x" * 65]))
    assert messages == ["No tasks were selected; nothing was cancelled."]
    for data in (post("finished", ["a"]), post("pending", ["a"], queue="nosuch")):
        _, messages = follow_post(admin_client, CANCEL, data)
        assert messages[0].startswith("Cannot cancel tasks of queue")
    assert r.dbsize() == 0
