"""Pausing and resuming a queue from the admin's Queues page (admin/pause.py): POST + confirm, permission, CSRF, log."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse

from tests.admin.test_site import client_for, follow_post, staff
from tests.helpers import keys

pytestmark = pytest.mark.django_db

QUEUES = reverse("admin:django_redisq_queue_changelist")
ACTION = reverse("admin:django_redisq_deadletter_queue_action")
PAUSE = {"backend": "default", "queue": "emails", "action": "pause"}


@pytest.fixture(autouse=True)
def fast_passwords(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def changer(db):
    return client_for(staff("changer", "view_deadletter", "change_deadletter"))


def test_pause_asks_first_then_pauses_is_logged_and_shown(r, changer):
    confirm = changer.post(ACTION, PAUSE)
    text = confirm.content.decode()
    assert confirm.status_code == 200 and "Are you sure you want to pause queue <strong>emails</strong>" in text
    assert not r.exists(keys("emails").paused)  # nothing changed yet
    response, messages = follow_post(changer, ACTION, {**PAUSE, "confirm": "yes"})
    assert messages and messages[0].startswith("Paused queue emails: within a second workers start none of its tasks")
    assert r.get(keys("emails").paused).endswith("|admin:changer")
    page = response.content.decode()
    state = page.split('id="redisq-state-default-emails"', 1)[1].split("</td>", 1)[0]
    assert 'class="redisq-paused">paused</span>' in state and "since" in state and "by admin:changer" in state
    assert "redisq-resume-emails" in page and "redisq-pause-default" in page
    [entry] = LogEntry.objects.all()
    assert (entry.action_flag, entry.object_id, entry.change_message, entry.user.username) == (
        CHANGE, "default/queue:emails", "Paused queue emails", "changer")
    assert changer.get(entry.get_admin_url())["Location"] == QUEUES  # "Recent actions" link

    resume = {**PAUSE, "action": "resume"}
    assert "paused since" in changer.post(ACTION, resume).content.decode()
    _, messages = follow_post(changer, ACTION, {**resume, "confirm": "yes"})
    assert messages == ["Resumed queue emails: workers serve it again within a second."]
    assert not r.exists(keys("emails").paused)
    assert [e.change_message for e in LogEntry.objects.order_by("pk")] == ["Paused queue emails", "Resumed queue emails"]


def test_pausing_twice_changes_nothing_and_logs_once(r, changer):
    follow_post(changer, ACTION, {**PAUSE, "confirm": "yes"})
    first = r.get(keys("emails").paused)
    _, messages = follow_post(changer, ACTION, {**PAUSE, "confirm": "yes"})
    assert messages == ["Queue emails was paused already; nothing changed."]
    assert r.get(keys("emails").paused) == first and LogEntry.objects.count() == 1


def test_viewers_see_the_state_but_cannot_pause(r, db):
    viewer = client_for(staff("viewer", "view_deadletter"))
    r.set(keys("low").paused, "1700000000000|ops")
    page = viewer.get(QUEUES).content.decode()
    assert 'class="redisq-paused">paused</span>' in page and "by ops" in page and "redisq-resume-low" not in page
    assert viewer.post(ACTION, {**PAUSE, "confirm": "yes"}).status_code == 403
    assert not r.exists(keys("emails").paused)


def test_it_needs_post_a_csrf_token_and_a_configured_queue(r, admin_user):
    strict = client_for(admin_user, enforce_csrf_checks=True)
    assert strict.get(ACTION).status_code == 405
    assert strict.post(ACTION, {**PAUSE, "confirm": "yes"}).status_code == 403
    assert not r.exists(keys("emails").paused)
    strict.get(QUEUES)
    token = strict.cookies[settings.CSRF_COOKIE_NAME].value
    _, messages = follow_post(strict, ACTION, {**PAUSE, "queue": "nope", "confirm": "yes", "csrfmiddlewaretoken": token})
    assert messages and "expected pause or resume of a configured queue" in messages[0]
    assert strict.post(ACTION, {**PAUSE, "confirm": "yes", "csrfmiddlewaretoken": token}).status_code == 302
    assert r.exists(keys("emails").paused)
