"""The admin's Topics page (admin/topics.py): lag, pending and drops per subscription; rewind by POST + confirm."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse

from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.topics import Topics
from tests.admin.test_site import client_for, follow_post, staff
from tests.events.conftest import THREE, events_settings
from tests.events.test_topics_ops import _half_consumed

pytestmark = pytest.mark.django_db

TOPICS = reverse("admin:django_redisq_topic_changelist")
REWIND = reverse("admin:django_redisq_deadletter_topic_rewind")


@pytest.fixture(autouse=True)
def fast_passwords(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def test_the_page_shows_each_subscription_and_a_rewind_asks_first(r):
    changer = client_for(staff("changer", "view_deadletter", "change_deadletter", "rewind_topic"))
    with events_settings(THREE, {"orders.placed": {"HEALTH_MAX_LAG": 5}}):
        ids = _half_consumed()
        page = changer.get(TOPICS).content.decode()
        row = page.split('id="redisq-subscription-mail-on-order"', 1)[1].split("</tr>", 1)[0]
        assert "orders.placed" in row and ids[3] in row and "emails" in row
        audit = page.split('id="redisq-subscription-audit"', 1)[1].split("</tr>", 1)[0]
        assert 'redisq-behind">10' in audit  # past HEALTH_MAX_LAG
        post = {"backend": "default", "subscription": "billing-on-order", "to": ids[5]}
        confirm = changer.post(REWIND, post).content.decode()
        assert "Are you sure you want to rewind subscription <strong>billing-on-order</strong>" in confirm
        topics = Topics(Broker(get_options()))
        assert topics.stats("orders.placed", ["billing-on-order"])["billing-on-order"].generation == 0  # not yet
        _, messages = follow_post(changer, REWIND, {**post, "confirm": "yes"})
        assert messages and messages[0].startswith("Rewound subscription billing-on-order")
        got = topics.read("orders.placed", "billing-on-order", "w2", 100)
        assert got.generation == 1 and [e.id for e in got.entries] == ids[5:]
        [entry] = LogEntry.objects.all()
        assert (entry.action_flag, entry.object_id) == (CHANGE, "default/subscription:billing-on-order")
        _, messages = follow_post(changer, REWIND, {**post, "to": "last tuesday", "confirm": "yes"})
        assert messages and "--to 'last tuesday'" in messages[0]


def test_viewers_see_the_page_but_cannot_rewind(r):
    viewer = client_for(staff("viewer", "view_deadletter"))
    with events_settings(THREE):
        _half_consumed()
        page = viewer.get(TOPICS).content.decode()
        assert "redisq-subscription-audit" in page and "Rewind…" not in page
        post = {"backend": "default", "subscription": "audit", "to": "earliest", "confirm": "yes"}
        assert viewer.post(REWIND, post).status_code == 403
        assert viewer.get(REWIND).status_code == 405


def test_a_rewind_needs_its_own_permission_not_only_change(r):
    """Rewinding re-runs every retained event: "change dead letter" alone (replay, delete, cancel) is not enough."""
    changer = client_for(staff("triager", "view_deadletter", "change_deadletter"))
    with events_settings(THREE):
        _half_consumed()
        page = changer.get(TOPICS).content.decode()
        assert "redisq-subscription-audit" in page and "Rewind…" not in page and REWIND not in page
        post = {"backend": "default", "subscription": "billing-on-order", "to": "earliest"}
        assert changer.post(REWIND, post).status_code == 403  # not even the confirmation page
        assert changer.post(REWIND, {**post, "confirm": "yes"}).status_code == 403
        stats = Topics(Broker(get_options())).stats("orders.placed", ["billing-on-order"])["billing-on-order"]
        assert stats.generation == 0 and stats.lag == 0  # nothing was rewound
        assert not LogEntry.objects.exists()
        rewinder = client_for(staff("rewinder", "view_deadletter", "rewind_topic"))  # the permission without "change"
        assert "Rewind…" not in rewinder.get(TOPICS).content.decode()
        assert rewinder.post(REWIND, {**post, "confirm": "yes"}).status_code == 403
