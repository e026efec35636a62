"""``manage.py redisq workflow ID [--json]`` and the ops view behind it."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_redisq import chain, chord
from django_redisq.ops.workflows import describe, workflow_of
from tests.conftest import topology_settings
from tests.helpers import run_in_thread
from tests.testapp import workflow_tasks as wt


def redisq(*args: str) -> str:
    out = io.StringIO()
    call_command("redisq", *args, stdout=out)
    return out.getvalue()


def test_text_and_json_of_a_failed_chord(r, make_worker):
    wf = chord([wt.add.s(1, 1), wt.fails_unless.s("c")], wt.total.s()).enqueue()
    for _ in range(4):
        run_in_thread(make_worker())
    text = redisq("workflow", wf.id)
    assert text.splitlines()[0].startswith(f"workflow {wf.id}: FAILED (failed): step 1")
    header, *rows = text.splitlines()[1:]
    assert header.split()[:3] == ["#", "STATE", "TASK"] and [r.split()[1] for r in rows] == ["finished", "dead", "waiting"]
    assert rows[2].split()[5] == "0,1" and "broken c" in rows[1]
    data = json.loads(redisq("workflow", wf.id, "--json"))
    assert [s["state"] for s in data["steps"]] == ["finished", "dead", "waiting"]
    assert data["steps"][1]["attempts"] == 2 and "broken c" in data["steps"][1]["error"]
    assert data["steps"][2]["parents"] == [0, 1] and data["status"] == "FAILED"
    assert describe(wf.id).steps[1].dead and workflow_of(wf.refresh().results[0].id) == wf.id


def test_a_running_chain(r, make_worker):
    wf = chain(wt.add.s(1, 1), wt.double.s()).enqueue()
    run_in_thread(make_worker("default"))
    data = json.loads(redisq("workflow", wf.id, "--json"))
    assert data["status"] == "RUNNING" and [s["state"] for s in data["steps"]] == ["finished", "pending"]


def test_unknown_workflow_and_unreachable_redis(r):
    with pytest.raises(CommandError, match="no workflow") as exc:
        redisq("workflow", "nosuchworkflow")
    assert exc.value.returncode == 1
    with topology_settings(REDIS_URL="redis://127.0.0.1:1/0"):
        from django_redisq import connection

        connection.reset()
        try:
            with pytest.raises(CommandError, match="cannot reach Redis") as exc:
                redisq("workflow", "x" * 22)
        finally:
            connection.reset()
    assert exc.value.returncode == 3
