"""A task's exception reaches error reporters: the logger django_redisq.errors, and Sentry in a runworker process.

``ERROR_REPORTING``: "attempt" (each failed attempt), "dead" (only the one leaving a dead letter), "off".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from django_redisq.exceptions import Retry, TaskCancelled
from django_redisq.settings.read import validate
from django_redisq.worker.running.reporting import ErrorReporter
from tests.conftest import topology_settings
from tests.testapp.tasks import add, always_fails, flaky


def run_until_finished(make_worker: Callable[..., Any], *results: Any) -> None:
    for _ in range(100):
        make_worker().run()
        if all(r.task.get_result(r.id).is_finished for r in results):
            return
    raise AssertionError("the tasks did not finish")


@pytest.fixture(autouse=True)
def _errors_captured(caplog: pytest.LogCaptureFixture) -> Any:
    """The logger does not propagate to the root logger, where caplog listens: caplog listens on it too."""
    errors = logging.getLogger("django_redisq.errors")
    errors.addHandler(caplog.handler)
    yield
    errors.removeHandler(caplog.handler)


def reported(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, int, str, str]]:
    return [(r.redisq_task.rsplit(".", 1)[-1], r.redisq_task_id, r.redisq_attempt, r.redisq_outcome, r.exc_info[0].__name__)  # type: ignore[attr-defined,index,union-attr]
            for r in caplog.records if r.name == "django_redisq.errors"]


def test_each_failed_attempt_is_logged_with_its_exception_and_tags(r: Any, make_worker: Callable[..., Any],
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="django_redisq.errors")
    dead = always_fails.delay("reported")  # max_retries=1: two attempts, then a dead letter
    ok = flaky.delay("reported-flaky", 1)  # fails once, then succeeds
    fine = add.delay(1, 1)
    run_until_finished(make_worker, dead, ok, fine)
    assert sorted(reported(caplog)) == sorted([("always_fails", dead.id, 1, "retry", "ValueError"),
                                               ("always_fails", dead.id, 2, "dead", "ValueError"),
                                               ("flaky", ok.id, 1, "retry", "RuntimeError")])
    record = next(r for r in caplog.records if r.name == "django_redisq.errors" and r.redisq_outcome == "dead")  # type: ignore[attr-defined]
    assert record.levelno == logging.ERROR and record.redisq_queue == "default"  # type: ignore[attr-defined]
    assert "ValueError: reported" in record.getMessage() and record.exc_info and record.exc_info[2] is not None


@pytest.mark.parametrize(("mode", "expected"), [("dead", [("always_fails", 2, "dead")]), ("off", [])])
def test_the_setting_reports_only_dead_letters_or_nothing(r: Any, make_worker: Callable[..., Any], caplog: pytest.LogCaptureFixture,
                                                          mode: str, expected: list[Any]) -> None:
    caplog.set_level(logging.ERROR, logger="django_redisq.errors")
    with topology_settings(ERROR_REPORTING=mode):
        dead = always_fails.delay("reported")
        ok = flaky.delay(f"reported-{mode}", 1)
        run_until_finished(make_worker, dead, ok)
    assert [(t, a, o) for t, _, a, o, _ in reported(caplog)] == expected


def test_cancellations_and_asked_retries_are_not_errors() -> None:
    reporter = ErrorReporter("attempt")
    assert not reporter.wanted(TaskCancelled("by admin"), "dead")
    assert not reporter.wanted(Retry(), "retry") and reporter.wanted(Retry(), "dead")
    assert reporter.wanted(ValueError(), "retry") and not reporter.wanted(ValueError(), "success")
    assert not ErrorReporter("dead").wanted(ValueError(), "retry") and ErrorReporter("dead").wanted(ValueError(), "dead")
    assert not ErrorReporter("off").wanted(ValueError(), "dead")


def test_a_bad_setting_is_check_e120() -> None:
    problems = validate("default", {"BACKEND": "django_redisq.backend.RedisQueueBackend", "OPTIONS": {"ERROR_REPORTING": "always"}})
    assert [(c, m) for c, m, _ in problems] == [
        ("E120", "TASKS['default']['OPTIONS']['ERROR_REPORTING'] must be one of 'attempt', 'dead', 'off', got 'always'.")]


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "count"), [("attempt", 3), ("dead", 1)])
def test_sentry_gets_one_tagged_event_per_failure_from_a_runworker_process(r: Any, tmp_path: Path, run_worker_process: Callable[..., Any],
                                                                          mode: str, count: int) -> None:
    pytest.importorskip("sentry_sdk", reason="the Sentry test needs sentry-sdk (the dev dependency group)")
    dead = always_fails.delay("to sentry")
    ok = flaky.delay(f"sentry-{mode}", 1)
    events_file = tmp_path / "events.jsonl"
    env = {"DJANGO_SETTINGS_MODULE": "tests.worker.sentry_worker_settings", "REDISQ_TEST_EVENTS": str(events_file),
           "REDISQ_TEST_ERROR_REPORTING": mode}
    for _ in range(10):  # a burst worker leaves when nothing is pending; the retries are due within 50 ms
        worker = run_worker_process("--burst", env=env)
        output = worker.output()
        assert worker.proc.returncode == 0, output
        if dead.task.get_result(dead.id).is_finished and ok.task.get_result(ok.id).is_finished:
            break
    events = [json.loads(line) for line in events_file.read_text().splitlines()] if events_file.exists() else []
    assert len(events) == count, [(e.get("logger"), e.get("tags"), e.get("message")) for e in events]  # one per failure, no duplicates
    got = sorted((e["tags"]["redisq.task"].rsplit(".", 1)[-1], str(e["tags"]["redisq.attempt"]), e["tags"]["redisq.outcome"],
                  e["exception"]["values"][-1]["type"]) for e in events)
    want = [("always_fails", "1", "retry", "ValueError"), ("always_fails", "2", "dead", "ValueError"), ("flaky", "1", "retry", "RuntimeError")]
    assert got == (want if mode == "attempt" else [want[1]])
    for e in events:
        assert e["tags"]["redisq.queue"] == "default" and e["tags"]["redisq.task_id"] in (dead.id, ok.id)
        assert e["contexts"]["redisq"]["task_id"] == e["tags"]["redisq.task_id"]
