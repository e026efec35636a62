"""Durable steps (django_redisq/durable/) run by real workers of each pool against a real Redis.

A step runs once per task and name: recorded before the task goes on, replayed from its record
on later attempts; a step that raises is not recorded; names used twice or moved fail the attempt.
"""

from __future__ import annotations

import pytest

from django_redisq.compat import TaskResultStatus
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from tests.helpers import keys, wait_for
from tests.testapp import tasks
from tests.testapp.tasks import EFFECTS
from tests.worker.test_pools import POOLS, serving


def _counts(r, key: str) -> dict[str, int]:
    return {name: int(r.hget(EFFECTS, f"{key}:{name}") or 0) for name in ("one", "two", "three")}


def _finished(result) -> bool:
    result.refresh()
    return result.status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)


@pytest.mark.parametrize("pool", POOLS)
def test_a_third_step_failing_twice_runs_three_times_and_the_first_two_once(r, pool):
    task = tasks.three_steps_async if pool == "asyncio" else tasks.three_steps
    res = task.enqueue("k", 2)
    with serving(pool):
        assert wait_for(lambda: _finished(res), timeout=30)
    assert res.status == TaskResultStatus.SUCCESSFUL, res.errors
    assert res.return_value == [1, 1, 3]
    assert _counts(r, "k") == {"one": 1, "two": 1, "three": 3}
    assert len(res.errors) == 2  # two failed attempts, each retried
    _, records = Broker(get_options("default")).durable.load("default", res.id)
    assert [(rec.name, rec.index, rec.value_json) for rec in sorted(records.values(), key=lambda x: x.index)] == [
        ("one", 0, "1"), ("two", 1, "1"), ("three", 2, "3")]


def test_step_records_survive_the_plain_ack_and_expire_with_the_task(r):
    res = tasks.three_steps.enqueue("plain", 0)
    with serving("threads"):
        assert wait_for(lambda: _finished(res), timeout=30)
    k = keys().task(res.id)
    fields = r.hgetall(k)
    assert {"step:one", "step:two", "step:three"} <= fields.keys() and fields["state"] == "finished"
    assert 0 < r.pttl(k)  # the task's RESULT_TTL holds its steps too


def test_a_step_name_used_twice_fails_the_attempt_with_a_clear_error(r):
    res = tasks.reuses_a_step_name.enqueue("dup")
    with serving("threads"):
        assert wait_for(lambda: _finished(res), timeout=30)
    assert res.status == TaskResultStatus.FAILED
    assert res.errors[-1].exception_class_path == "django_redisq.exceptions.StepError"
    assert "used twice" in res.errors[-1].traceback
    assert r.hget(EFFECTS, "dup:b") is None


def test_steps_that_change_order_between_attempts_fail_the_attempt(r):
    res = tasks.reorders_its_steps.enqueue("ord")
    with serving("threads"):
        assert wait_for(lambda: _finished(res), timeout=30)
    assert res.status == TaskResultStatus.FAILED
    assert "keep their order" in res.errors[-1].traceback
    assert (int(r.hget(EFFECTS, "ord:a")), int(r.hget(EFFECTS, "ord:b"))) == (1, 1)  # neither ran again out of order


def test_redisq_task_lists_the_steps_and_an_operator_clears_one_to_run_it_again(r):
    from io import StringIO

    from django.core.management import call_command

    res = tasks.three_steps.enqueue("cli", 0)
    with serving("threads"):
        assert wait_for(lambda: _finished(res), timeout=30)
    shown = StringIO()
    call_command("redisq", "task", res.id, stdout=shown)
    lines = [line for line in shown.getvalue().splitlines() if line.startswith("step:")]
    assert len(lines) == 3 and "#0 one" in lines[0] and "took" in lines[0] and "1 bytes" in lines[0]
    call_command("redisq", "task", res.id, "--clear-step", "two", stdout=StringIO())
    assert [x.name for x in Broker(get_options("default")).durable.load("default", res.id)[1].values()] == ["one", "three"]


def test_the_admin_task_page_lists_the_steps_and_clears_one(r, admin_client, client, django_user_model):
    """The task's page shows each recorded step; "Clear" (change permission, POST) forgets one and logs it; a
    user with "view" only sees the steps and no button, and a POST of theirs is refused."""
    from django.contrib.admin.models import LogEntry
    from django.contrib.auth.models import Permission
    from django.urls import reverse

    res = tasks.three_steps.enqueue("admin", 0)
    with serving("threads"):
        assert wait_for(lambda: _finished(res), timeout=30)
    page_url = reverse("admin:django_redisq_deadletter_detail", args=["default", "default", res.id])
    page = admin_client.get(page_url).content.decode()
    assert "Durable steps (3)" in page and page.count('class="redisq-step"') == 3 and "took" in page
    assert page.count('class="redisq-clear-step"') == 3
    clear = reverse("admin:django_redisq_deadletter_clear_step")
    form = {"backend": "default", "queue": "default", "task_id": res.id, "step": "two"}
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_deadletter"))
    client.force_login(viewer)
    assert 'class="redisq-clear-step"' not in client.get(page_url).content.decode()
    assert client.post(clear, form).status_code == 403
    assert admin_client.get(clear).status_code == 405
    done = admin_client.post(clear, form)
    assert done.status_code == 302 and done["Location"] == page_url
    assert [x.name for x in Broker(get_options("default")).durable.load("default", res.id)[1].values()] == ["one", "three"]
    assert LogEntry.objects.filter(change_message__contains="Cleared durable step 'two'").count() == 1
    after = admin_client.get(page_url).content.decode()
    assert "Durable steps (2)" in after and "Cleared step" in after
