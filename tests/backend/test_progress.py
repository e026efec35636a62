"""Progress from a running task: report_progress in the task, stored with it (rate-limited), read back by id
(sync and async), shown in the admin's task page and by ``redisq task ID``. Real workers, the suite's redis-server."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse

from django_redisq import aget_progress, connection, get_progress, progress, report_progress
from django_redisq.compat import TaskResultDoesNotExist, TaskResultStatus
from django_redisq.exceptions import RedisError
from django_redisq.progress import INTERVAL, Progress
from django_redisq.worker.running.progress import ProgressWriter
from tests.helpers import wait_for
from tests.testapp.integration_tasks import reports_async, reports_in_a_tight_loop, reports_then_fails, reports_then_waits
from tests.testapp.tasks import add


def redisq(*args: str) -> str:
    out = io.StringIO()
    call_command("redisq", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


# -- the call in the task ------------------------------------------------------------------

def test_outside_a_worker_it_does_nothing_but_checks_its_values() -> None:
    assert progress.current.get() is None
    report_progress(1, 10, message="fine")  # no task to store it with: nothing happens
    report_progress(0, 0)
    for done, total, message, error in ((-1, 10, "", ValueError), (1, float("nan"), "", ValueError), ("3", 10, "", ValueError),
                                        (True, 10, "", ValueError), (1, 10, 7, TypeError), (1, 10, "x" * 201, ValueError)):
        with pytest.raises(error, match=r"report_progress\(\)"):
            report_progress(done, total, message=message)


def test_the_writer_stores_one_report_per_interval_and_the_last_one_at_the_end() -> None:
    stored: list[str] = []
    now = [100.0]
    writer = ProgressWriter(lambda text: stored.append(text) or True, attempt=2, interval=INTERVAL, clock=lambda: now[0])
    writer.report(1, 10, "a")  # the first: at once
    now[0] += INTERVAL / 4
    writer.report(2, 10, "b")  # within the interval: held back
    writer.report(3, 10, "c")  # replaces b
    assert [progress.decode(s).message for s in stored] == ["a"]  # type: ignore[union-attr]
    now[0] += INTERVAL
    writer.report(4, 10, "d")  # the interval passed: stored, c is dropped for d
    now[0] += INTERVAL / 4
    writer.report(10, 10, "done")  # done: at once, whatever the interval
    writer.report(5, 10, "e")  # held back until the end
    writer.flush()
    writer.flush()  # nothing left: no second write
    assert [(p.done, p.message, p.attempt) for p in map(progress.decode, stored)] == [  # type: ignore[union-attr]
        (1, "a", 2), (4, "d", 2), (10, "done", 2), (5, "e", 2)]


def test_a_write_that_fails_is_logged_never_the_tasks_failure(caplog: pytest.LogCaptureFixture) -> None:
    def down(text: str) -> bool:
        raise RedisError("Connection refused")

    ProgressWriter(down, attempt=1).report(1, 2, "")
    assert "progress report was not stored" in caplog.text


def test_progress_reads_as_a_fraction_and_a_percent() -> None:
    assert Progress(3, 10).percent == 30 and Progress(0, 0).fraction == 1.0 and Progress(15, 10).fraction == 1.0
    assert progress.decode("not json") is None and progress.decode('{"done": -1, "total": 2}') is None and progress.decode("") is None


# -- through a worker ----------------------------------------------------------------------

def test_progress_is_read_by_id_in_python_the_admin_and_the_command_while_the_task_runs(
        r: Any, make_worker: Callable[..., Any], admin_client: Any) -> None:
    result = reports_then_waits.enqueue("progress-go", 10)
    assert get_progress(result.id) is None  # nothing reported yet
    worker = threading.Thread(target=make_worker().run, daemon=True)
    worker.start()
    try:
        found = wait_for(lambda: get_progress(result), 30)
        assert found, "no first report"
        assert (found.done, found.total, found.message, found.attempt, found.percent) == (3, 10, "row 3", 1, 30)
        assert found.updated_at is not None
        assert asyncio.run(aget_progress(result.id)) == found
        page = admin_client.get(reverse("admin:django_redisq_deadletter_detail", args=["default", "default", result.id]))
        html = page.content.decode()
        assert page.status_code == 200 and 'id="redisq-progress"' in html
        assert '<progress value="0.3" max="1"' in html and "30% (3 of 10): row 3" in html
        listing = admin_client.get(reverse("admin:django_redisq_deadletter_tasks", args=["running"]) + "?queue=default")
        assert 'class="redisq-row-progress" value="0.3" max="1" title="row 3"' in listing.content.decode()
        text = redisq("task", result.id)
        assert "state:     running" in text or "state:     held" in text
        assert "progress:  [#########---------------------]  30%  3 of 10: row 3" in text
        import json

        data = json.loads(redisq("task", result.id, "--json"))
        assert data["progress"]["done"] == 3 and data["progress"]["percent"] == 30 and data["row"]["id"] == result.id
    finally:
        r.set("progress-go", 1)
        worker.join(30)
    assert reports_then_waits.get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    last = get_progress(result.id)
    assert last is not None and (last.done, last.total, last.message) == (10, 10, "all rows")
    assert "progress:  [##############################] 100%  10 of 10: all rows" in redisq("task", result.id)


def test_a_tight_loop_writes_about_twice_a_second_and_its_last_report_is_stored(r: Any, make_worker: Callable[..., Any]) -> None:
    n = 20000
    result = reports_in_a_tight_loop.enqueue(n)
    make_worker().run()
    done = reports_in_a_tight_loop.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    writes, elapsed = done.return_value["writes"], done.return_value["elapsed"]
    assert 1 <= writes <= elapsed / INTERVAL + 2, done.return_value  # not one write per report: at most one per interval
    last = get_progress(result.id)
    assert last is not None and (last.done, last.message) == (n, f"step {n}")  # held back, stored when the attempt ended


def test_each_attempt_reports_its_own_progress(r: Any, make_worker: Callable[..., Any]) -> None:
    result = reports_then_fails.enqueue("progress-attempts")
    assert wait_for(lambda: make_worker().run() is not None and reports_then_fails.get_result(result.id).is_finished, 30), \
        "the retry did not succeed"
    last = get_progress(result.id)
    assert last is not None and (last.done, last.message, last.attempt) == (2, "attempt 2", 2)


@pytest.mark.parametrize("pool", ["threads", "asyncio"])
def test_an_async_task_reports_progress_in_either_pool(r: Any, make_worker: Callable[..., Any], pool: str) -> None:
    result = reports_async.enqueue(40)
    make_worker(pool=pool).run()
    assert reports_async.get_result(result.id).return_value == 40
    last = get_progress(result.id)
    assert last is not None and (last.done, last.total) == (40, 40)


@pytest.mark.slow
def test_a_process_pool_child_stores_its_tasks_progress(r: Any, make_worker: Callable[..., Any]) -> None:
    result = reports_in_a_tight_loop.enqueue(500)
    make_worker(pool="processes").run()
    assert reports_in_a_tight_loop.get_result(result.id).status == TaskResultStatus.SUCCESSFUL
    last = get_progress(result.id)
    assert last is not None and (last.done, last.total, last.message) == (500, 501, "step 500")


def test_a_worker_that_no_longer_holds_a_task_cannot_write_its_progress(r: Any, broker: Any) -> None:
    result = add.enqueue(1, 2)
    assert broker.progress.save("default", result.id, "someone-else", progress.encode(1, 2, "", 1)) is False
    assert broker.progress.save("default", "no-such-task", "someone-else", progress.encode(1, 2, "", 1)) is False
    assert r.hget(f"redisq:{{default}}:t:{result.id}", "progress") is None
    assert not r.exists("redisq:{default}:t:no-such-task")


def test_unknown_tasks_and_bad_ids(r: Any) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        get_progress("no-such-task")
    with pytest.raises(TaskResultDoesNotExist):
        get_progress("")
    with pytest.raises(CommandError, match="no task 'no-such-task' in any configured queue") as missing:
        redisq("task", "no-such-task")
    assert missing.value.returncode == 1
    with pytest.raises(CommandError, match="not a task id") as bad:
        redisq("task", "bad id!")
    assert bad.value.returncode == 2


def test_redisq_task_says_in_one_line_when_redis_is_down(r: Any) -> None:
    from django.conf import settings

    tasks = {**settings.TASKS, "default": {**settings.TASKS["default"], "OPTIONS": {**settings.TASKS["default"]["OPTIONS"],
                                                                                 "REDIS_URL": "redis://127.0.0.1:1/0"}}}
    with override_settings(TASKS=tasks):
        connection.reset()
        try:
            with pytest.raises(CommandError, match="cannot reach Redis at") as down:
                redisq("task", "some-id")
        finally:
            connection.reset()
    assert down.value.returncode == 3  # Redis unreachable, as for every redisq subcommand


def test_with_lifecycle_events_each_stored_report_is_a_progress_event(r: Any, make_worker: Callable[..., Any]) -> None:
    import json as _json

    from django_redisq.events.subscriptions import LIFECYCLE_TOPIC
    from django_redisq.store.keys import TopicKeys
    from tests.conftest import topology_settings

    with topology_settings(LIFECYCLE_EVENTS=True):
        result = reports_async.enqueue(40)
        make_worker().run()
        entries = [_json.loads(fields["p"]) for _, fields in r.xrange(TopicKeys(LIFECYCLE_TOPIC).stream)]
    reports = [e for e in entries if e["state"] == "progress"]
    assert reports, entries
    assert all(e["task_id"] == result.id and e["task"] == "tests.testapp.integration_tasks.reports_async" and e["attempt"] == 1
               for e in reports)
    assert (reports[0]["done"], reports[-1]["done"], reports[-1]["total"]) == (1, 40, 40)  # the first at once, the last when done
    assert len(reports) <= 3  # not one per report_progress() call: one per stored report
    states = [e["state"] for e in entries if e["task_id"] == result.id]
    assert states.index("started") < states.index("progress") and states[-1] == "succeeded"
