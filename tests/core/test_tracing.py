"""OpenTelemetry across the queue: a producer span at enqueue, a consumer span per attempt, one trace.

In this process the spans go to the SDK's InMemorySpanExporter through ``tracing.provider_override``
(the global provider stays unset here, so the rest of the suite runs untraced); across processes a
real ``runworker`` configures the SDK in its settings (tests/core/otel_worker_settings.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the tracing tests need opentelemetry-sdk (the dev dependency group)")

from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from django_redisq.core import tracing
from tests.helpers import by_kind
from tests.testapp.tasks import add, always_fails

ROOT = Path(__file__).resolve().parents[2]




def test_one_trace_from_the_view_through_the_producer_to_each_attempt(r: Any, spans: InMemorySpanExporter,
                                                                       make_worker: Callable[..., Any]) -> None:
    view_tracer = tracing.provider_override.get_tracer("tests")
    with view_tracer.start_as_current_span("GET /checkout", kind=SpanKind.SERVER) as view:
        result = add.delay(2, 3)
    stored = json.loads(r.hget(f"redisq:{{default}}:t:{result.id}", "msg"))
    carrier = stored["m"]["_trace"]
    assert carrier["traceparent"].startswith("00-" + format(view.get_span_context().trace_id, "032x"))
    make_worker().run()
    [producer] = by_kind(spans, SpanKind.PRODUCER)
    [consumer] = by_kind(spans, SpanKind.CONSUMER)
    trace_id = view.get_span_context().trace_id
    assert producer.context.trace_id == consumer.context.trace_id == trace_id
    assert producer.parent.span_id == view.get_span_context().span_id
    assert consumer.parent.span_id == producer.context.span_id  # the creation context is the parent (core/tracing.py says why)
    assert producer.name == "send default" and consumer.name == "process default"
    assert dict(producer.attributes) == {
        "messaging.system": "redisq", "messaging.destination.name": "default", "messaging.operation.type": "send",
        "messaging.operation.name": "send", "messaging.redisq.task.name": "tests.testapp.tasks.add", "messaging.message.id": result.id}
    assert dict(consumer.attributes) == {
        "messaging.system": "redisq", "messaging.destination.name": "default", "messaging.operation.type": "process",
        "messaging.operation.name": "process", "messaging.redisq.task.name": "tests.testapp.tasks.add",
        "messaging.message.id": result.id, "messaging.redisq.attempt": 1, "messaging.redisq.outcome": "success"}
    assert consumer.status.status_code == StatusCode.UNSET


def test_each_failed_attempt_records_its_exception_and_outcome(r: Any, spans: InMemorySpanExporter,
                                                               make_worker: Callable[..., Any]) -> None:
    result = always_fails.delay("traced failure")  # max_retries=1: a retry, then a dead letter
    for _ in range(50):
        make_worker().run()
        if always_fails.get_result(result.id).is_finished:
            break
    attempts = sorted(by_kind(spans, SpanKind.CONSUMER), key=lambda s: s.attributes["messaging.redisq.attempt"])
    [producer] = by_kind(spans, SpanKind.PRODUCER)
    assert [(s.attributes["messaging.redisq.attempt"], s.attributes["messaging.redisq.outcome"]) for s in attempts] == [
        (1, "retry"), (2, "dead")]
    for s in attempts:
        assert s.parent.span_id == producer.context.span_id and s.context.trace_id == producer.context.trace_id
        assert s.status.status_code == StatusCode.ERROR and "ValueError: traced failure" in s.status.description
        [event] = [e for e in s.events if e.name == "exception"]
        assert event.attributes["exception.type"] == "ValueError" and event.attributes["exception.message"] == "traced failure"


def test_the_attempts_span_is_current_inside_the_task(r: Any, spans: InMemorySpanExporter, make_worker: Callable[..., Any]) -> None:
    from tests.testapp.integration_tasks import traced_inside

    result = traced_inside.delay()
    make_worker().run()
    [consumer] = by_kind(spans, SpanKind.CONSUMER)
    assert traced_inside.get_result(result.id).return_value == format(consumer.context.span_id, "016x")


def test_a_task_enqueued_by_a_task_continues_the_same_trace(r: Any, spans: InMemorySpanExporter,
                                                            make_worker: Callable[..., Any]) -> None:
    from tests.testapp.integration_tasks import enqueues_next

    first = enqueues_next.delay(41)
    make_worker().run()  # runs the first, then (burst: until nothing is pending) the one it enqueued
    second_id = enqueues_next.get_result(first.id).return_value
    assert add.get_result(second_id).return_value == 42
    consumers = {s.attributes["messaging.message.id"]: s for s in by_kind(spans, SpanKind.CONSUMER)}
    producers = {s.attributes["messaging.message.id"]: s for s in by_kind(spans, SpanKind.PRODUCER)}
    assert producers[second_id].parent.span_id == consumers[first.id].context.span_id  # enqueued inside the first attempt
    assert consumers[second_id].parent.span_id == producers[second_id].context.span_id
    assert len({s.context.trace_id for s in spans.get_finished_spans()}) == 1


@pytest.mark.parametrize("pool", ["threads", "asyncio"])
def test_aenqueue_and_the_asyncio_pool_trace_alike(r: Any, spans: InMemorySpanExporter, make_worker: Callable[..., Any], pool: str) -> None:
    from tests.testapp.integration_tasks import reports_async

    result = asyncio.run(reports_async.aenqueue(3))
    make_worker(pool=pool).run()
    assert reports_async.get_result(result.id).return_value == 3
    [producer] = by_kind(spans, SpanKind.PRODUCER)
    [consumer] = by_kind(spans, SpanKind.CONSUMER)
    assert consumer.parent.span_id == producer.context.span_id and producer.attributes["messaging.message.id"] == result.id


def test_a_batch_is_one_producer_span_and_a_failed_enqueue_is_recorded(r: Any, spans: InMemorySpanExporter) -> None:
    from django_redisq.exceptions import InvalidArguments

    add.enqueue_many([((1, 2), {}), ((3, 4), {})])
    [batch] = by_kind(spans, SpanKind.PRODUCER)
    assert batch.attributes["messaging.batch.message_count"] == 2 and "messaging.message.id" not in batch.attributes
    spans.clear()
    with pytest.raises(InvalidArguments):
        add.delay(object(), 1)
    [failed] = by_kind(spans, SpanKind.PRODUCER)
    assert failed.status.status_code == StatusCode.ERROR and failed.events[0].name == "exception"


def test_without_a_provider_nothing_is_traced_nor_stored(r: Any) -> None:
    assert tracing.provider_override is None
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # this suite never sets the global one
    assert tracing.tracer() is None and tracing.send("x", "default") is tracing.NOOP
    result = add.delay(1, 1)
    assert "m" not in json.loads(r.hget(f"redisq:{{default}}:t:{result.id}", "msg"))


def test_off_never_imports_opentelemetry(redis_url: str, r: Any) -> None:
    """Not configured, tracing imports nothing: in a process where any import of OpenTelemetry fails (as if it were
    not installed), enqueue and a worker's attempt work as ever. (redis-py may import it for its own observability,
    and copes with its absence; this module must not need it.)"""
    code = (
        "import sys; sys.modules['opentelemetry'] = None  # any import of it raises ImportError from here on\n"
        "import django; django.setup()\n"
        "from django.conf import settings\n"
        f"settings.TASKS['default']['OPTIONS']['REDIS_URL'] = {redis_url!r}\n"
        "from tests.testapp.tasks import add\n"
        "from django_redisq.worker.worker import Worker\n"
        "from django_redisq.core import tracing\n"
        "assert tracing.tracer() is None\n"
        "result = add.delay(1, 2); Worker(burst=True).run()\n"
        "print(add.get_result(result.id).return_value)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "3"


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_one_trace_id_from_this_process_to_a_runworker_process(r: Any, spans: InMemorySpanExporter, tmp_path: Path,
                                                                run_worker_process: Callable[..., Any], pool: str) -> None:
    view_tracer = tracing.provider_override.get_tracer("tests")
    with view_tracer.start_as_current_span("GET /checkout", kind=SpanKind.SERVER) as view:
        result = add.delay(20, 22)
    [producer] = by_kind(spans, SpanKind.PRODUCER)
    span_file = tmp_path / "worker-spans.jsonl"
    worker = run_worker_process("--burst", "--pool", pool,
                                env={"DJANGO_SETTINGS_MODULE": "tests.core.otel_worker_settings", "REDISQ_TEST_SPANS": str(span_file)})
    output = worker.output()
    assert worker.proc.returncode == 0, output
    assert add.get_result(result.id).return_value == 42
    worker_spans = [json.loads(line) for line in span_file.read_text().splitlines() if line.strip()]
    [consumer] = [s for s in worker_spans if s["kind"] == "SpanKind.CONSUMER"]
    trace_id = "0x" + format(view.get_span_context().trace_id, "032x")
    assert producer.context.trace_id == view.get_span_context().trace_id
    assert consumer["context"]["trace_id"] == trace_id  # one trace: the view, the producer here, the attempt there
    assert consumer["parent_id"] == "0x" + format(producer.context.span_id, "016x")
    assert consumer["attributes"]["messaging.message.id"] == result.id
    assert consumer["attributes"]["messaging.redisq.outcome"] == "success"
