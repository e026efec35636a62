"""The worker's task log (worker/observability/tasklog.py): failures and dead letters at once, successes summed up, a line per success opt-in."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from django_redisq.worker.observability.tasklog import TaskLog
from django_redisq.worker.running.outcome import DEAD, RETRY, SUCCESS


@dataclass
class D:
    id: str
    queue: str = "default"
    deliveries: int = 1


@dataclass
class O:  # noqa: E742 - an outcome's fields as tasklog reads them
    kind: str
    duration: float = 0.001
    task_name: str = "shop.tasks.t"
    reason: str = ""
    delay_ms: int = 0
    error: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.kind != SUCCESS


@pytest.fixture
def records(caplog):  # type: ignore[no-untyped-def]
    caplog.set_level(logging.INFO, logger="django_redisq.tasks")
    return caplog


def test_successes_are_summed_up_failures_logged_at_once(records):
    log = TaskLog(every=3600)
    log.settled([(D("a"), O(SUCCESS)), (D("b"), O(SUCCESS, duration=0.25)), (D("c"), O(RETRY, delay_ms=500, error={"tb": "Traceback: x"}))])
    log.settled([(D("d"), O(DEAD, reason="max_retries"))])
    lines = [(r.levelname, r.getMessage()) for r in records.records]
    assert [lv for lv, _ in lines] == ["WARNING", "WARNING"]  # the two failures, nothing per success
    assert "id=c" in lines[0][1] and "retry_in=500ms" in lines[0][1] and "Traceback: x" in lines[0][1]
    assert "reason=max_retries" in lines[1][1]
    log.tick(force=True)
    level, summary = records.records[-1].levelname, records.records[-1].getMessage()
    assert level == "INFO" and summary.startswith("settled 4 task(s) in ")
    assert "1 dead, 1 retry, 2 success; slowest shop.tasks.t id=b 250.0ms" in summary
    log.tick(force=True)
    assert len(records.records) == 3  # an empty window writes nothing


def test_a_window_whose_tasks_never_ran_says_so_instead_of_an_empty_slowest(records):
    """Tasks dead-lettered before they ran (an unknown task, a bad message) have no duration: no "slowest  id= 0.0ms"."""
    log = TaskLog(every=3600)
    log.settled([(D("a"), O(DEAD, duration=0.0, reason="unknown_task")), (D("b"), O(DEAD, duration=0.0, reason="bad_message"))])
    log.tick(force=True)
    summary = records.records[-1].getMessage()
    assert summary.endswith(": 2 dead; none of them ran") and "slowest" not in summary, summary


def test_a_window_writes_its_summary_when_due_and_not_before(records, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("django_redisq.worker.observability.tasklog.time.monotonic", lambda: clock[0])
    log = TaskLog(every=10)
    log.settled([(D("a"), O(SUCCESS))])
    clock[0] += 9.9
    log.tick()
    assert records.records == []
    clock[0] += 0.2
    log.tick()
    assert [r.getMessage()[:19] for r in records.records] == ["settled 1 task(s) i"]


def test_a_line_per_successful_task_is_opt_in_at_info(caplog):
    """Off by default (apps.py sets its logger to WARNING unless LOGGING names it); on, one INFO line per task."""
    from django_redisq.apps import SUCCESS_LOGGER

    caplog.set_level(logging.DEBUG, logger="django_redisq.tasks")  # even DEBUG on the parent: no line per success
    assert logging.getLogger(SUCCESS_LOGGER).level == logging.WARNING
    log = TaskLog(every=3600)
    log.settled([(D(f"t{i}"), O(SUCCESS)) for i in range(3)])
    assert not [r for r in caplog.records if "outcome=success" in r.getMessage()]
    caplog.set_level(logging.INFO, logger=SUCCESS_LOGGER)  # what LOGGING naming the logger, or runworker -v 2, does
    log.settled([(D(f"t{i}"), O(SUCCESS)) for i in range(3)])
    lines = [r for r in caplog.records if "outcome=success" in r.getMessage()]
    assert [(r.name, r.levelname) for r in lines] == [(SUCCESS_LOGGER, "INFO")] * 3
    assert lines[0].getMessage() == "task shop.tasks.t id=t0 queue=default attempt=1 outcome=success duration=1.0ms"


def test_every_dead_letter_has_its_line_with_a_hint(records):
    log = TaskLog(every=3600)
    never_ran = O(DEAD, reason="unknown_task", task_name="", error={"msg": "'shop.jobs.f' is not a registered task"})
    never_ran.__class__ = type("NotFailed", (O,), {"failed": property(lambda self: False)})
    log.settled([(D("u"), never_ran)])
    [line] = [r.getMessage() for r in records.records if r.levelname == "WARNING"]
    assert line.startswith("task ? id=u queue=default attempt=1 outcome=dead duration=1.0ms "
                           "reason=unknown_task: 'shop.jobs.f' is not a registered task; hint: this worker has no such task")
