"""The admin's list of workflows: the newest first, a page at a time, each linked to its page; on the index.

The list is the store's index of workflows (``{workflows}:index``, wf_index.lua):
a bounded read of each listed workflow's own record, no step read, and the
index itself capped at the newest ``INDEX_KEPT``.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_redisq import chain, chord, group
from django_redisq.ops.workflows import newest
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import WorkflowKeys
from django_redisq.store.workflows import WorkflowStore
from tests.admin.test_site import client_for, fast_passwords, staff  # noqa: F401 - the autouse fixture
from tests.helpers import run_in_thread
from tests.testapp import workflow_tasks as wt

LIST = "admin:django_redisq_workflow_changelist"


@pytest.fixture
def viewer(db):  # type: ignore[no-untyped-def]
    return client_for(staff("wflister", "view_deadletter"))


def test_the_list_shows_each_workflow_newest_first_with_its_state_and_link(r, make_worker, viewer):
    done = chain(wt.add.s(1, 1), wt.add.s(2)).enqueue()
    for _ in range(3):
        run_in_thread(make_worker())
    waiting = chord([wt.add.s(1, 1), wt.add.s(2, 2), wt.add.s(3, 3)], wt.total.s()).enqueue()
    page = viewer.get(reverse(LIST))
    assert page.status_code == 200
    html = page.content.decode()
    assert html.index(waiting.id) < html.index(done.id)  # newest first
    for wf in (done, waiting):
        assert reverse("admin:django_redisq_deadletter_workflow", args=["default", wf.id]) in html
    listing = newest("default")
    rows = {row.id: row for row in listing.rows}
    assert listing.total == 2 and [row.id for row in listing.rows] == [waiting.id, done.id]
    assert (rows[done.id].status, rows[done.id].done, rows[done.id].total) == ("succeeded", 2, 2)
    assert (rows[waiting.id].status, rows[waiting.id].done, rows[waiting.id].total) == ("running", 0, 4)
    assert rows[waiting.id].created_at is not None and rows[waiting.id].finished_at is None
    assert "0 / 4" in html and "2 / 2" in html


def test_pages_of_the_list_and_an_expired_workflow(r, viewer):
    ids = [group([wt.add.s(i, i)]).enqueue().id for i in range(5)]
    r.delete(*WorkflowKeys(ids[0]).all())  # the oldest expired: listed as such, without a link
    first, second = newest("default", 0, 2), newest("default", 4, 2)
    assert [row.id for row in first.rows] == ids[:2:-1][:2] and first.next_offset == 2 and first.previous_offset is None
    assert [(row.id, row.status) for row in second.rows] == [(ids[0], "expired")] and second.next_offset is None
    html = viewer.get(reverse(LIST) + "?offset=4").content.decode()
    assert "expired" in html and reverse("admin:django_redisq_deadletter_workflow", args=["default", ids[0]]) not in html


def test_the_index_is_capped_at_the_newest(r, monkeypatch):
    monkeypatch.setattr("django_redisq.store.workflows.store.INDEX_KEPT", 3)
    ids = [group([wt.add.s(i, i)]).enqueue().id for i in range(5)]
    total, found = WorkflowStore(Broker(get_options("default"))).newest(0, 10)
    assert total == 3 and [i for i, _ in found] == ids[:1:-1]


def test_the_list_is_on_the_admin_index_and_needs_the_view_permission(r, db):
    viewer = client_for(staff("wfidx", "view_deadletter"))
    assert reverse(LIST) in viewer.get(reverse("admin:index")).content.decode()
    assert client_for(staff("nobody-wf")).get(reverse(LIST)).status_code == 403
