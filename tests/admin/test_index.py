"""The admin index lists every page of the app as an entry (not one click inside), each opening its page."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

ENTRIES = {  # index entry -> its URL name and a text of the page it opens
    "Dead letters": ("django_redisq_deadletter_changelist", "No dead letters in queue default"),
    "Pending tasks": ("django_redisq_pendingtask_changelist", "Pending tasks"),
    "Queues": ("django_redisq_queue_changelist", 'id="redisq-queues-default"'),
    "Running tasks": ("django_redisq_runningtask_changelist", "Running tasks"),
    "Scheduled tasks": ("django_redisq_scheduledtask_changelist", "Scheduled tasks"),
    "Schedules": ("django_redisq_schedule_changelist", "Schedules"),
    "Topics": ("django_redisq_topic_changelist", "Topics"),
    "Workflows": ("django_redisq_workflow_changelist", "Workflows, newest first"),
}


def entries(html: str) -> list[str]:
    app = html[html.index('class="app-django_redisq'):]
    app = app[:app.index("</table>")]
    return re.findall(r'<th scope="row" id="django_redisq-\w+">\s*<a href="[^"]+"[^>]*>([^<]+)</a>', app)


def test_the_index_lists_every_page_and_each_entry_opens_it(r):
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    html = client.get(reverse("admin:index")).content.decode()
    assert entries(html) == sorted(ENTRIES)  # Django sorts the entries by name
    for name, (url_name, text) in ENTRIES.items():
        url = reverse(f"admin:{url_name}")
        assert f'href="{url}"' in html, name
        response = client.get(url)
        assert response.status_code == 200 and text in response.content.decode(), name
    # the app's own index page lists them too, and the sidebar marks the page being shown
    assert entries(client.get(reverse("admin:app_list", args=["django_redisq"])).content.decode()) == sorted(ENTRIES)
    page = client.get(reverse("admin:django_redisq_queue_changelist")).content.decode()
    assert re.search(r'<tr class="model-queue current-model">', page) and 'class="model-deadletter current-model"' not in page


def test_the_entries_follow_the_dead_letters_permissions(r):
    """Staff with "view" of dead letters see every entry (and no add link); without it, none; the pages refuse them."""
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_deadletter"))
    client = Client()
    client.force_login(viewer)
    html = client.get(reverse("admin:index")).content.decode()
    assert entries(html) == sorted(ENTRIES)
    assert "addlink" not in html[html.index('class="app-django_redisq'):][:4000]
    stranger = User.objects.create_user("stranger", password="pw", is_staff=True)
    client.force_login(stranger)
    assert "app-django_redisq" not in client.get(reverse("admin:index")).content.decode()
    for url_name, _ in ENTRIES.values():
        assert client.get(reverse(f"admin:{url_name}")).status_code == 403, url_name
