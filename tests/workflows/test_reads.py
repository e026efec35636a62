"""Reading a workflow (issue 36): bounded, never a write, and honest about a step whose task is no longer registered.

Writes are counted on the real server: ``INFO commandstats`` after ``CONFIG RESETSTAT``, each command judged by
its own flags (``COMMAND INFO``: ``write`` or ``may_replicate``, which an EVALSHA of a script that writes has).
"""

from __future__ import annotations

import json
from typing import Any

from django.urls import reverse

from django_redisq import chain, chord
from django_redisq.compat import TaskResultStatus, task_backends
from django_redisq.store.keys import WorkflowKeys
from django_redisq.workflows.enqueue import get_workflow
from django_redisq.workflows.steps import UNREGISTERED, UnregisteredTask
from tests.admin.test_site import client_for, fast_passwords, staff  # noqa: F401 - the autouse fixture
from tests.testapp import workflow_tasks as wt

GONE = "tests.testapp.workflow_tasks.renamed_by_a_deploy"


def run_commands(r: Any) -> dict[str, int]:
    """Commands run since the last call (neither this INFO nor the RESETSTAT counted), by name."""
    stats = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()}
    r.config_resetstat()
    return {k: n for k, n in stats.items() if not k.startswith(("info", "config"))}


def writes(r: Any, ran: dict[str, int]) -> dict[str, int]:
    """Those of ``ran`` that may write, by their flags on this server."""
    found = {}
    for name, n in ran.items():
        info = r.execute_command("COMMAND", "INFO", name.split("|")[0])
        flags = info.get(name.split("|")[0], {}).get("flags", []) if isinstance(info, dict) else info[0][2]
        if {"write", "may_replicate"} & {f.decode() if isinstance(f, bytes) else f for f in flags}:
            found[name] = n
    return found


def rename_waiting_step(r: Any, wf_id: str, step: int) -> None:
    """As a deploy that renamed the task while the step waited: its stored spec and the steps' list name the old path."""
    k = WorkflowKeys(wf_id)
    spec = json.loads(r.hget(k.spec, str(step)))
    r.hset(k.spec, str(step), json.dumps({**spec, "t": GONE}))
    steps = json.loads(r.hget(k.meta, "steps"))
    steps[step]["t"] = GONE
    r.hset(k.meta, "steps", json.dumps(steps))


def test_a_waiting_step_whose_task_is_gone_reads_as_such(r, db):
    wf = chain(wt.add.s(1, 1), wt.double.s()).enqueue()
    rename_waiting_step(r, wf.id, 1)
    result = task_backends["default"].get_result(wf.results[1].id)  # raised InvalidTask before
    assert isinstance(result.task, UnregisteredTask) and result.task.module_path == GONE
    assert result.status == TaskResultStatus.READY
    assert get_workflow(wf.id).results[1].task.module_path == GONE
    page = client_for(staff("v-gone", "view_deadletter")).get(workflow_url(wf.id))  # answered 500 before
    assert page.status_code == 200 and UNREGISTERED + GONE in page.content.decode()


def test_a_queued_step_whose_task_is_gone_reads_as_such(r, db, broker):
    wf = chain(wt.add.s(1, 1), wt.double.s()).enqueue()
    r.hset(broker.keys("default").task(wf.results[0].id), "task", GONE)
    page = client_for(staff("v-gone2", "view_deadletter")).get(workflow_url(wf.id))
    assert page.status_code == 200 and UNREGISTERED + GONE in page.content.decode()
    assert get_workflow(wf.id).results[0].task.module_path == GONE


def test_get_result_of_one_step_reads_that_step_only(r):
    """The same commands for the callback of a 10-member chord and of a 2,000-member one (1,000s of HGETALL before)."""
    backend = task_backends["default"]
    counts = []
    for members in (10, 2000):
        wf = chord([wt.add.s(i, 1) for i in range(members)], wt.total.s()).enqueue()
        run_commands(r)
        assert backend.get_result(wf.results[-1].id).status == TaskResultStatus.READY
        counts.append(run_commands(r))
    assert counts[0] == counts[1] and sum(counts[1].values()) <= 12, counts


def test_refresh_and_the_page_write_nothing(r, db, broker):
    """A step dead-lettered where no hook saw it made refresh() and a GET of the page fail the workflow (writes)."""
    wf = chain(wt.add.s(1, 1), wt.double.s()).enqueue()
    broker.operator.cancel("default", [wf.results[0].id], "elsewhere")
    viewer = client_for(staff("v-nowrite", "view_deadletter"))
    run_commands(r)
    wf.refresh()
    assert writes(r, run_commands(r)) == {}
    assert viewer.get(workflow_url(wf.id)).status_code == 200
    assert writes(r, run_commands(r)) == {}
    assert wf.refresh().status == TaskResultStatus.FAILED and "dead-lettered" in wf.error  # told, not written
    assert [x.status for x in wf.results] == [TaskResultStatus.FAILED, TaskResultStatus.READY]
    assert r.hget(WorkflowKeys(wf.id).meta, "status") == "running"
    assert wf.repair() == 1 and writes(r, run_commands(r))  # the counting sees a write where there is one


def test_the_repair_is_a_post_with_the_change_permission(r, db, broker):
    wf = chain(wt.add.s(1, 1), wt.double.s()).enqueue()
    broker.operator.cancel("default", [wf.results[0].id], "elsewhere")
    assert client_for(staff("v-post", "view_deadletter")).post(workflow_url(wf.id)).status_code == 403
    changer = client_for(staff("c-post", "view_deadletter", "change_deadletter"))
    assert "redisq-workflow-repair" in changer.get(workflow_url(wf.id)).content.decode()
    assert changer.post(workflow_url(wf.id)).status_code == 302
    assert r.hget(WorkflowKeys(wf.id).meta, "status") == "failed"


def test_the_page_shows_counts_and_pages_through_steps(r, db):
    wf = chord([wt.add.s(i, 1) for i in range(250)], wt.total.s()).enqueue()
    viewer = client_for(staff("v-pages", "view_deadletter"))
    first = viewer.get(workflow_url(wf.id)).content.decode()
    assert first.count('class="redisq-step-') == 100 and "251 steps: 0 done, 0 failed" in first and "?offset=100" in first
    last = viewer.get(workflow_url(wf.id) + "?offset=200").content.decode()
    assert last.count('class="redisq-step-') == 51 and "?offset=100" in last and "?offset=300" not in last
    assert "(250 steps)" in last  # the callback's 250 parents, abbreviated


def test_the_command_pages_through_steps(r):
    from io import StringIO

    from django.core.management import call_command

    wf = chord([wt.add.s(i, 1) for i in range(30)], wt.total.s()).enqueue()
    out = StringIO()
    call_command("redisq", "workflow", wf.id, "--offset", "25", "--limit", "10", stdout=out)
    text = out.getvalue()
    assert "[31 steps: 0 done, 0 failed; steps 25-30 shown]" in text.splitlines()[0] and f"{wf.id}.30" in text and f"{wf.id}.24" not in text
    out = StringIO()
    call_command("redisq", "workflow", wf.id, "--limit", "5", "--json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["total"] == 31 and len(data["steps"]) == 5 and data["offset"] == 0


def test_enqueue_returns_every_step_of_a_big_workflow(r):
    wf = chord([wt.add.s(i, 1) for i in range(150)], wt.total.s()).enqueue()
    assert len(wf.results) == 151 and wf.results[-1].id == f"{wf.id}.150" and wf.results[-1].task.module_path.endswith(".total")
    assert wf.refresh().results[-1].id == f"{wf.id}.150" and wf.states[-1] == "waiting"


def workflow_url(wf_id: str) -> str:
    return reverse("admin:django_redisq_deadletter_workflow", args=["default", wf_id])


def test_a_depends_on_workflow_reads_its_parents_by_their_own_ids(r, make_worker):
    """Its parents have ids of their own (not ``<workflow>.<n>``): the status is read from them."""
    from django_redisq.ops.workflows import workflow_of
    from tests.helpers import run_in_thread

    running = wt.add.enqueue(1, 1)
    r3 = wt.tag.using(depends_on=[running]).enqueue("x")
    wf = get_workflow(workflow_of(r3.id))
    assert wf.status == TaskResultStatus.READY and wf.results[0].id == running.id
    bad = wt.fails_unless.enqueue("p")
    r4 = wt.tag.using(depends_on=[bad]).enqueue("never")
    for _ in range(5):
        run_in_thread(make_worker("default"))
    failed = get_workflow(workflow_of(r4.id))
    assert failed.status == TaskResultStatus.FAILED and failed.states[0] == "dead" and bad.id in failed.error
