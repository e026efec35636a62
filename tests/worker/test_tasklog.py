"""The worker's task log (worker/tasklog.py): failures at once, successes summed up, lines per task at DEBUG."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pytest

from django_redisq.worker.outcome import DEAD, RETRY, SUCCESS
from django_redisq.worker.tasklog import TaskLog


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


def test_a_window_writes_its_summary_when_due_and_not_before(records, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("django_redisq.worker.tasklog.time.monotonic", lambda: clock[0])
    log = TaskLog(every=10)
    log.settled([(D("a"), O(SUCCESS))])
    clock[0] += 9.9
    log.tick()
    assert records.records == []
    clock[0] += 0.2
    log.tick()
    assert [r.getMessage()[:19] for r in records.records] == ["settled 1 task(s) i"]


def test_debug_gives_a_line_per_task(caplog):
    caplog.set_level(logging.DEBUG, logger="django_redisq.tasks")
    log = TaskLog(every=3600)
    log.settled([(D(f"t{i}"), O(SUCCESS)) for i in range(3)])
    assert sum("outcome=success" in r.getMessage() and r.levelname == "DEBUG" for r in caplog.records) == 3
