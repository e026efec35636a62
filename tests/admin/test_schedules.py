"""The admin's Schedules page (admin/site.py) with Django's test client: listing, permissions, POST + confirm, audit log."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse

from tests.admin.test_site import client_for, follow_post, staff
from tests.helpers import keys
from tests.worker.test_scheduler import TASK, every, marker, with_schedules

pytestmark = pytest.mark.django_db

PAGE = reverse("admin:django_redisq_schedule_changelist")
ACTION = reverse("admin:django_redisq_deadletter_schedule_action")
ENTRIES = {
    "nightly": {"task": TASK, "cron": "0 3 * * *", "timezone": "Europe/Berlin", "kwargs": {"key": "n"}},
    "sync": every(300),
    "broken": {"task": TASK, "cron": "61 * * * *"},
}


@pytest.fixture(autouse=True)
def fast_passwords(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def schedules(r):
    with with_schedules(ENTRIES):
        yield


@pytest.fixture
def viewer(db):
    return client_for(staff("viewer", "view_deadletter"))


@pytest.fixture
def changer(db):
    return client_for(staff("changer", "change_deadletter"))


def detail_url(task_id: str, queue: str = "default") -> str:
    return reverse("admin:django_redisq_deadletter_detail", args=["default", queue, task_id])


# -- the page --------------------------------------------------------------------


def test_the_page_shows_each_schedule_in_words_with_zone_runs_and_counts(r, admin_client):
    r.hset(keys().schedule("sync"), mapping={"fired": 7, "missed": 2, "skipped": 1, "paused_ticks": 3})
    page = admin_client.get(PAGE).content.decode()
    assert "daily at 03:00" in page and "<code class=\"quiet\">0 3 * * *</code>" in page and "Europe/Berlin" in page
    assert "every 5 minutes" in page and ("CET" in page or "CEST" in page)  # next run in the schedule's own zone
    assert '<span class="redisq-fired">7 fired</span><span class="redisq-missed">2 missed</span>' in page
    assert '<span class="redisq-skipped">1 skipped</span><span class="redisq-paused-ticks">3 paused</span>' in page
    assert page.count('class="redisq-active"') == 2 and "redisq-pause-nightly" in page and "redisq-run-sync" in page


def test_a_broken_schedule_is_shown_with_its_reason_and_no_actions(r, admin_client):
    page = admin_client.get(PAGE).content.decode()
    row = page[page.index('id="redisq-schedule-broken"'):].split("</tr>", 1)[0]
    assert "Not run:" in row and "[E023]" in row and "61 * * * *" in row
    assert "<form" not in row


def test_the_last_run_links_to_its_task_with_its_status(r, admin_client, make_worker):
    admin_client.post(ACTION, {"backend": "default", "name": "nightly", "action": "run", "confirm": "yes"})
    task_id = marker(r, "nightly")["manual_id"]
    page = admin_client.get(PAGE).content.decode()
    assert f'href="{detail_url(task_id)}" class="redisq-last-state">pending</a>' in page and "(run now)" in page
    make_worker(scheduler=False).run()
    assert f'href="{detail_url(task_id)}" class="redisq-last-state">finished</a>' in admin_client.get(PAGE).content.decode()
    r.delete(keys().task(task_id))  # the result expired: no link to a page that would 404
    page = admin_client.get(PAGE).content.decode()
    assert detail_url(task_id) not in page and "result expired" in page


def test_every_task_queue_page_links_to_the_schedules(r, admin_client):
    for url in (reverse("admin:django_redisq_queue_changelist"), reverse("admin:django_redisq_deadletter_changelist"), PAGE):
        assert f'<a href="{PAGE}">Schedules</a>' in admin_client.get(url).content.decode()


def test_no_schedules_says_where_to_add_them(r, admin_client):
    with with_schedules({}):
        assert "No periodic schedules." in admin_client.get(PAGE).content.decode()


# -- permissions, POST, CSRF ---------------------------------------------------------


def test_staff_without_the_view_permission_get_403(r, db):
    assert client_for(staff("nobody")).get(PAGE).status_code == 403


def test_viewers_see_the_page_but_no_actions_and_cannot_post(r, viewer):
    page = viewer.get(PAGE).content.decode()
    assert "daily at 03:00" in page and "<form" not in page.split('id="content-main"', 1)[1]
    for data in ({"backend": "default", "name": "nightly", "action": "pause"},
                 {"backend": "default", "name": "nightly", "action": "run", "confirm": "yes"}):
        assert viewer.post(ACTION, data).status_code == 403
    assert marker(r, "nightly") == {} and r.llen(keys().pending) == 0


def test_actions_need_post_and_a_csrf_token(r, admin_user):
    strict = client_for(admin_user, enforce_csrf_checks=True)
    assert strict.get(ACTION).status_code == 405
    data = {"backend": "default", "name": "nightly", "action": "pause", "confirm": "yes"}
    assert strict.post(ACTION, data).status_code == 403
    assert marker(r, "nightly") == {}
    strict.get(PAGE)
    token = strict.cookies[settings.CSRF_COOKIE_NAME].value
    assert strict.post(ACTION, {**data, "csrfmiddlewaretoken": token}).status_code == 302
    assert marker(r, "nightly")["paused"]


# -- the actions ------------------------------------------------------------------------


def test_pause_asks_first_then_pauses_and_is_logged(r, changer):
    data = {"backend": "default", "name": "nightly", "action": "pause"}
    confirm = changer.post(ACTION, data)
    assert confirm.status_code == 200 and "Are you sure you want to pause schedule <strong>nightly</strong>" in confirm.content.decode()
    assert marker(r, "nightly") == {}  # nothing changed yet
    response, messages = follow_post(changer, ACTION, {**data, "confirm": "yes"})
    assert messages == ["Paused schedule nightly: no worker runs its ticks until it is resumed."]
    assert marker(r, "nightly")["paused_by"] == "changer"
    page = response.content.decode()
    assert 'class="redisq-paused">paused</span>' in page and "by changer" in page and "redisq-resume-nightly" in page
    [entry] = LogEntry.objects.all()
    assert (entry.action_flag, entry.object_id, entry.change_message, entry.user.username) == (
        CHANGE, "default/schedule:nightly", "Paused schedule nightly", "changer")
    assert changer.get(entry.get_admin_url())["Location"] == PAGE + "?backend=default"  # "Recent actions" link


def test_pausing_twice_changes_nothing_and_logs_once(r, changer):
    data = {"backend": "default", "name": "sync", "action": "pause", "confirm": "yes"}
    follow_post(changer, ACTION, data)
    _, messages = follow_post(changer, ACTION, data)
    assert messages == ["Schedule sync was paused already; nothing changed."] and LogEntry.objects.count() == 1


def test_resume_asks_first_then_resumes_and_is_logged(r, changer):
    follow_post(changer, ACTION, {"backend": "default", "name": "sync", "action": "pause", "confirm": "yes"})
    data = {"backend": "default", "name": "sync", "action": "resume"}
    confirm = changer.post(ACTION, data).content.decode()
    assert "Are you sure you want to resume schedule <strong>sync</strong>, paused since" in confirm and "by changer" in confirm
    assert marker(r, "sync")["paused"]
    response, messages = follow_post(changer, ACTION, {**data, "confirm": "yes"})
    assert messages[0].startswith("Resumed schedule sync: its next tick runs as usual")
    assert marker(r, "sync")["paused"] == "" and "redisq-pause-sync" in response.content.decode()
    assert list(LogEntry.objects.order_by("id").values_list("change_message", flat=True)) == [
        "Paused schedule sync", "Resumed schedule sync"]


def test_run_now_asks_first_then_enqueues_one_task_and_logs_a_link_to_it(r, changer):
    data = {"backend": "default", "name": "nightly", "action": "run"}
    confirm = changer.post(ACTION, data).content.decode()
    assert "Are you sure you want to run schedule <strong>nightly</strong> now?" in confirm and TASK in confirm
    assert r.llen(keys().pending) == 0
    _, messages = follow_post(changer, ACTION, {**data, "confirm": "yes"})
    [task_id] = r.lrange(keys().pending, 0, -1)
    assert messages == [f"Enqueued the task of schedule nightly now, as {task_id} on queue default."]
    assert "last" not in marker(r, "nightly")  # its ticks are untouched
    [entry] = LogEntry.objects.all()
    assert (entry.object_id, entry.change_message) == (f"default/default/{task_id}", "Ran schedule nightly now")
    assert changer.get(entry.get_admin_url())["Location"] == detail_url(task_id)


@pytest.mark.parametrize(("name", "action", "error"), [
    ("broken", "pause", "Schedule 'broken' cannot be changed: [E023]"),
    ("gone", "run", "Schedule 'gone' cannot be changed: it is not configured."),
    ("sync", "explode", "Unknown action 'explode'"),
])
def test_broken_unknown_or_wrong_requests_change_nothing(r, changer, name, action, error):
    _, messages = follow_post(changer, ACTION, {"backend": "default", "name": name, "action": action, "confirm": "yes"})
    assert messages[0].startswith(error)
    assert r.keys("*") == [] and not LogEntry.objects.exists()
