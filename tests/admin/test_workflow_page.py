"""The admin page of a workflow, and the link to it from a step's page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_redisq import chord
from tests.admin.test_site import client_for, fast_passwords, staff  # noqa: F401 - the autouse fixture
from tests.helpers import run_in_thread
from tests.testapp import workflow_tasks as wt


def workflow_url(wf_id: str) -> str:
    return reverse("admin:django_redisq_deadletter_workflow", args=["default", wf_id])


@pytest.fixture
def viewer(db):  # type: ignore[no-untyped-def]
    return client_for(staff("wfviewer", "view_deadletter"))


def test_steps_states_and_links_both_ways(r, make_worker, viewer):
    wf = chord([wt.add.s(1, 1), wt.fails_unless.s("adm")], wt.total.s()).enqueue()
    for _ in range(4):
        run_in_thread(make_worker())
    wf.refresh()
    page = viewer.get(workflow_url(wf.id))
    assert page.status_code == 200
    html = page.content.decode()
    assert "FAILED" in html and "redisq-step-finished" in html and "redisq-step-dead" in html and "redisq-step-waiting" in html
    dead_link = reverse("admin:django_redisq_deadletter_detail", args=["default", "default", wf.results[1].id])
    assert dead_link in html  # the dead step's page, with Replay
    step = viewer.get(dead_link)
    assert step.status_code == 200 and workflow_url(wf.id) in step.content.decode()
    assert "A dead step can be replayed" in html


def test_a_workflow_without_a_dead_step_does_not_speak_of_replaying_one(r, make_worker, viewer):
    wf = chord([wt.add.s(1, 1), wt.add.s(2, 2)], wt.total.s()).enqueue()
    html = viewer.get(workflow_url(wf.id)).content.decode()
    assert "A dead step can be replayed" not in html  # waiting: nothing is dead
    for _ in range(4):
        run_in_thread(make_worker())
    html = viewer.get(workflow_url(wf.id)).content.decode()
    assert "SUCCESSFUL" in html and "A dead step can be replayed" not in html


def test_unknown_workflow_and_permissions(r, db):
    viewer = client_for(staff("v2", "view_deadletter"))
    assert viewer.get(workflow_url("nosuchworkflow")).status_code == 404
    nobody = client_for(staff("nobody"))
    wf = chord([wt.add.s(1, 1)], wt.total.s()).enqueue()
    assert nobody.get(workflow_url(wf.id)).status_code == 403
