"""OpenTelemetry through workflows and events: every step and every subscriber task is in the trace that created it.

Spans of this process go to the SDK's InMemorySpanExporter through ``tracing.provider_override`` (as in
test_tracing.py); a real ``runworker`` configures the SDK in its settings (tests/core/otel_worker_settings.py) and
writes its spans to a file.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the tracing tests need opentelemetry-sdk (the dev dependency group)")

from django.db import transaction
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from django_redisq import chain, chord
from django_redisq.compat import TaskResultStatus
from django_redisq.core import tracing
from django_redisq.events.publish import publish, publish_on_commit
from django_redisq.settings.read import get_options
from django_redisq.store.broker import Broker
from django_redisq.store.keys import QueueKeys, TopicKeys, WorkflowKeys
from django_redisq.store.steps.replies import NewTask
from django_redisq.worker.background.pump import EventPump
from django_redisq.workflows.canvas import error_id
from tests.events.conftest import H, events_settings, runs
from tests.helpers import by_kind, run_in_thread, wait_for
from tests.testapp import workflow_tasks as wt
from tests.testapp.tasks import add

TOPIC = "orders.placed"
BILLING = {"billing-on-order": {"topic": TOPIC, "task": H + "billing"}}  # its tasks go to "default"
OTEL_ENV = {"DJANGO_SETTINGS_MODULE": "tests.core.otel_worker_settings"}




def consumers_by_id(exporter: InMemorySpanExporter) -> dict[str, list[Any]]:
    """task id -> its attempts' consumer spans, in attempt order."""
    found: dict[str, list[Any]] = {}
    for s in sorted(by_kind(exporter, SpanKind.CONSUMER), key=lambda s: s.attributes["messaging.redisq.attempt"]):
        found.setdefault(s.attributes["messaging.message.id"], []).append(s)
    return found


def view() -> Any:
    return tracing.provider_override.get_tracer("tests").start_as_current_span("GET /checkout", kind=SpanKind.SERVER)


def finish(make_worker: Callable[..., Any], wf: Any, rounds: int = 20) -> Any:
    for _ in range(rounds):
        run_in_thread(make_worker("default", "emails", "low"))
        if wf.refresh().status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED):
            return wf
    raise AssertionError(f"workflow did not end: {wf.status} {wf.states}")


def stored_metadata(r: Any, queue: str, task_id: str) -> dict[str, Any]:
    return json.loads(r.hget(QueueKeys(queue).task(task_id), "msg")).get("m") or {}


# -- workflows ------------------------------------------------------------


def test_every_step_of_a_chain_and_chord_is_in_the_creators_trace_and_links_to_what_released_it(r, spans, make_worker):
    with view() as request:
        wf = chain(wt.add.s(1, 2), chord([wt.add.s(1), wt.add.s(2)], wt.total.s())).enqueue()
    trace_id = request.get_span_context().trace_id
    [producer] = by_kind(spans, SpanKind.PRODUCER)  # one span for the workflow's creation, not one per step
    assert producer.name == "send default" and producer.parent.span_id == request.get_span_context().span_id
    assert dict(producer.attributes) == {
        "messaging.system": "redisq", "messaging.operation.type": "send", "messaging.operation.name": "send",
        "messaging.destination.name": "default", "messaging.redisq.workflow.id": wf.id, "messaging.batch.message_count": 4}
    # the steps the worker queues later carry the creator's context in their stored spec
    specs = {int(k): json.loads(v) for k, v in r.hgetall(WorkflowKeys(wf.id).spec).items()}
    assert sorted(specs) == [1, 2, 3]
    for spec in specs.values():
        assert spec["m"]["_trace"]["traceparent"].split("-")[1:3] == [format(trace_id, "032x"), format(producer.context.span_id, "016x")]
    finish(make_worker, wf)
    assert wf.status == TaskResultStatus.SUCCESSFUL and wf.return_value == 9
    attempts = consumers_by_id(spans)
    ids = [res.id for res in wf.results]
    assert set(attempts) == set(ids)
    for step in ids:
        [span] = attempts[step]
        assert span.context.trace_id == trace_id and span.parent.span_id == producer.context.span_id, step
    first = attempts[ids[0]][0]
    assert list(attempts[ids[0]][0].links) == []  # queued by the creator: no attempt released it
    for member in ids[1:3]:  # released by the first step's attempt
        [link] = attempts[member][0].links
        assert (link.context.trace_id, link.context.span_id) == (trace_id, first.context.span_id)
        assert link.attributes["messaging.redisq.link"] == "released_by"
    [link] = attempts[ids[3]][0].links  # the callback: released by whichever member finished last
    assert link.context.span_id in {attempts[m][0].context.span_id for m in ids[1:3]}
    assert stored_metadata(r, "default", ids[3])["_trace_link"].split("-")[2] == format(link.context.span_id, "016x")


def test_depends_on_continues_its_enqueue_and_links_to_the_parent_that_released_it(r, spans, make_worker):
    with view() as request:
        parent = wt.add.enqueue(1, 1)
        child = wt.tag.using(depends_on=[parent]).enqueue("after")
    producers = {s.attributes["messaging.message.id"]: s for s in by_kind(spans, SpanKind.PRODUCER)}
    assert set(producers) == {parent.id, child.id}
    run_in_thread(make_worker("default"))
    assert child.refresh() is None and child.status == TaskResultStatus.SUCCESSFUL
    attempts = consumers_by_id(spans)
    [mine], [theirs] = attempts[child.id], attempts[parent.id]
    assert mine.context.trace_id == theirs.context.trace_id == request.get_span_context().trace_id
    assert mine.parent.span_id == producers[child.id].context.span_id  # its own enqueue, as a single task's
    [link] = mine.links
    assert link.context.span_id == theirs.context.span_id


def test_aenqueue_with_depends_on_is_one_producer_span_whose_context_the_call_carries(r, spans, make_worker):
    parent = wt.add.enqueue(1, 1)
    spans.clear()
    child = asyncio.run(wt.tag.using(depends_on=[parent]).aenqueue("after"))
    [producer] = by_kind(spans, SpanKind.PRODUCER)  # the aenqueue's own span, not a second one from its thread
    assert producer.attributes["messaging.message.id"] == child.id
    run_in_thread(make_worker("default"))
    [mine] = consumers_by_id(spans)[child.id]
    assert mine.parent.span_id == producer.context.span_id


def test_on_error_continues_the_workflows_trace_and_links_to_the_attempt_that_failed_for_good(r, spans, make_worker):
    with view() as request:
        wf = chain(wt.fails_unless.s("traced"), wt.double.s()).enqueue(on_error=wt.on_failure.s("note"))
    [producer] = by_kind(spans, SpanKind.PRODUCER)
    assert producer.name == "send" and "messaging.destination.name" not in producer.attributes  # steps on two queues
    for _ in range(40):  # the retry waits for its backoff
        run_in_thread(make_worker("default", "emails"))
        if wt.on_failure.get_result(error_id(wf.id)).status == TaskResultStatus.SUCCESSFUL:
            break
    attempts = consumers_by_id(spans)
    failed = attempts[wf.results[0].id]
    assert [s.attributes["messaging.redisq.outcome"] for s in failed] == ["retry", "dead"]
    [handler] = attempts[error_id(wf.id)]
    assert handler.context.trace_id == request.get_span_context().trace_id and handler.parent.span_id == producer.context.span_id
    [link] = handler.links
    assert link.context.span_id == failed[-1].context.span_id


def test_a_garbage_trace_in_a_message_never_stops_its_task(r, spans, make_worker, broker):
    """Another producer's message with a ``_trace`` / ``_trace_link`` that is no carrier: the task runs, untraced."""
    bad = [{"_trace": {"traceparent": 5, "tracestate": ["x"]}, "_trace_link": "nonsense"},
           {"_trace": "00-not-a-dict", "_trace_link": 7}, {"_trace": {"traceparent": "00-zz-yy-01"}}]
    items = [NewTask(f"bad-{i}", json.dumps({"v": 1, "args": [i, 1], "kwargs": {}, "m": m}), "tests.testapp.tasks.add", 0, "")
             for i, m in enumerate(bad)]
    broker.enqueue("default", items)
    run_in_thread(make_worker("default"))
    assert [add.get_result(f"bad-{i}").return_value for i in range(3)] == [1, 2, 3]
    attempts = consumers_by_id(spans)
    for i in range(3):
        [span] = attempts[f"bad-{i}"]
        assert span.parent is None and list(span.links) == []


# -- events -----------------------------------------------------------------


def test_publish_is_a_producer_span_whose_context_the_subscriber_task_continues(r, spans, make_worker):
    with events_settings(BILLING):
        with view() as request:
            entry = publish(TOPIC, {"n": 1})
        [producer] = by_kind(spans, SpanKind.PRODUCER)
        assert producer.name == f"send {TOPIC}" and producer.parent.span_id == request.get_span_context().span_id
        assert dict(producer.attributes) == {"messaging.system": "redisq", "messaging.destination.name": TOPIC,
                                             "messaging.operation.type": "send", "messaging.operation.name": "send",
                                             "messaging.message.id": entry}
        [(_, fields)] = r.xrange(TopicKeys(TOPIC).stream)
        assert json.loads(fields["tc"])["traceparent"].split("-")[2] == format(producer.context.span_id, "016x")
        options = get_options()
        pump = EventPump(options, Broker(options), threading.Event(), "c1", ["default"])
        assert pump.pump_once(pump.subs[0], block_ms=0) is False
        run_in_thread(make_worker("default"))
        assert runs(r, "billing") == {entry: 1}
        [task_span] = by_kind(spans, SpanKind.CONSUMER)
        assert task_span.context.trace_id == request.get_span_context().trace_id
        assert task_span.parent.span_id == producer.context.span_id


@pytest.mark.django_db(transaction=True)
def test_publish_on_commit_is_a_child_of_the_span_it_was_called_in(r, spans):
    with events_settings(BILLING):
        with transaction.atomic():
            with view() as request:
                publish_on_commit(TOPIC, {"n": 1})
            assert spans.get_finished_spans()[-1].name == "GET /checkout"  # nothing published yet
        [producer] = by_kind(spans, SpanKind.PRODUCER)  # published at the commit, after that span ended
        assert producer.parent.span_id == request.get_span_context().span_id
        assert producer.context.trace_id == request.get_span_context().trace_id


def test_garbage_trace_fields_never_crash_the_pump_nor_drop_the_event(r, spans, make_worker):
    garbage = ["garbage", '{"traceparent": 5}', '["00-x"]', "[" * 5000, '{"traceparent": "00-zz-yy-01"}',
               json.dumps({f"k{i}": "v" * 600 for i in range(20)}), '{"a":' * 3]
    with events_settings(BILLING):
        options = get_options()
        pump = EventPump(options, Broker(options), threading.Event(), "c1", ["default"])
        pump.join(pump.subs[0])
        stream = TopicKeys(TOPIC).stream
        ids = [r.xadd(stream, {"p": json.dumps({"n": i}), "tc": tc}) for i, tc in enumerate(garbage)]
        with view() as request:
            good = publish(TOPIC, {"n": len(ids)})
        assert pump.pump_once(pump.subs[0], block_ms=0) is False  # no exception: each entry handled
        assert r.xpending(stream, "billing-on-order")["pending"] == 0 and r.zcard(QueueKeys("default").dead) == 0
        assert r.llen(QueueKeys("default").pending) == len(ids) + 1  # every event became its task
        run_in_thread(make_worker("default"))
        assert runs(r, "billing") == {i: 1 for i in [*ids, good]}
        parents = {s.attributes["messaging.message.id"]: s for s in by_kind(spans, SpanKind.CONSUMER)}
        traced = [s for s in parents.values() if s.parent is not None]
        [task_span] = traced  # the published one continues its trace; the garbage ones are roots
        assert task_span.context.trace_id == request.get_span_context().trace_id


# -- off ----------------------------------------------------------------------


def test_off_no_trace_field_in_an_entry_and_no_trace_in_a_workflows_steps(r, make_worker):
    assert tracing.tracer() is None
    with events_settings(BILLING):
        entry = publish(TOPIC, {"n": 1})
        assert r.xrange(TopicKeys(TOPIC).stream) == [(entry, {"p": '{"n":1}'})]
        options = get_options()
        pump = EventPump(options, Broker(options), threading.Event(), "c1", ["default"])
        assert pump.pump_once(pump.subs[0], block_ms=0) is False
        assert "m" not in json.loads(r.hget(QueueKeys("default").task(pump.subs[0].task_id(0, entry)), "msg"))
    wf = chain(wt.add.s(1, 2), chord([wt.add.s(1), wt.add.s(2)], wt.total.s())).enqueue(on_error=wt.on_failure.s("x"))
    parent = wt.add.enqueue(1, 1)
    child = wt.tag.using(depends_on=[parent]).enqueue("after")
    stored = [*r.hgetall(WorkflowKeys(wf.id).spec).values(), r.hget(WorkflowKeys(wf.id).meta, "on_error")]
    assert stored and not any("_trace" in s for s in stored)
    finish(make_worker, wf)
    assert child.refresh() is None and child.status == TaskResultStatus.SUCCESSFUL
    tasks = [res.id for res in wf.results] + [parent.id, child.id]
    for task_id in tasks:
        assert not any(k.startswith("_trace") for k in stored_metadata(r, "default", task_id)), task_id



# -- across processes -----------------------------------------------------------


def read_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_chord_created_here_runs_in_a_runworker_in_this_trace(r, spans, tmp_path, run_worker_process, pool):
    with view() as request:
        wf = chain(wt.add.s(1, 2), chord([wt.add.s(i) for i in range(3)], wt.total.s())).enqueue()
    [producer] = by_kind(spans, SpanKind.PRODUCER)
    span_file = tmp_path / "worker-spans.jsonl"
    for _ in range(5):
        worker = run_worker_process("default", "--burst", "--pool", pool, env={**OTEL_ENV, "REDISQ_TEST_SPANS": str(span_file)})
        output = worker.output()
        assert worker.proc.returncode == 0, output
        if wf.refresh().status == TaskResultStatus.SUCCESSFUL:
            break
    assert wf.status == TaskResultStatus.SUCCESSFUL and wf.return_value == 3 + 4 + 5
    attempts = {s["attributes"]["messaging.message.id"]: s for s in read_spans(span_file) if s["kind"] == "SpanKind.CONSUMER"}
    ids = [res.id for res in wf.results]
    assert set(attempts) == set(ids)
    trace_id = "0x" + format(request.get_span_context().trace_id, "032x")
    for step in ids:  # every step, the callback included: the view's trace, child of the workflow's producer span
        assert attempts[step]["context"]["trace_id"] == trace_id, step
        assert attempts[step]["parent_id"] == "0x" + format(producer.context.span_id, "016x"), step
    assert attempts[ids[0]]["links"] == []
    for member in ids[1:4]:
        [link] = attempts[member]["links"]
        assert link["context"]["span_id"] == attempts[ids[0]]["context"]["span_id"]
    [link] = attempts[ids[4]]["links"]
    assert link["context"]["trace_id"] == trace_id
    assert link["context"]["span_id"] in {attempts[m]["context"]["span_id"] for m in ids[1:4]}


@pytest.mark.slow
def test_an_event_published_here_runs_in_a_runworker_in_this_trace_and_a_garbage_entry_runs_too(r, spans, tmp_path,
                                                                                                  run_worker_process):
    span_file = tmp_path / "worker-spans.jsonl"
    with events_settings(BILLING):
        with view() as request:
            entry = publish(TOPIC, {"n": 1})  # creates the subscription's group ("latest" starts here)
        [producer] = by_kind(spans, SpanKind.PRODUCER)
        foreign = r.xadd(TopicKeys(TOPIC).stream, {"p": '{"n": 2}', "tc": '{"traceparent": ['})
        worker = run_worker_process("default", env={**OTEL_ENV, "REDISQ_TEST_SPANS": str(span_file),
                                                    "REDISQ_SUBSCRIPTIONS": json.dumps(BILLING)})
        try:
            assert wait_for(lambda: runs(r, "billing") == {entry: 1, foreign: 1}, 60), (runs(r, "billing"), worker.output())
            assert wait_for(lambda: sum(s["kind"] == "SpanKind.CONSUMER" for s in read_spans(span_file)) == 2, 30)
        finally:
            worker.proc.send_signal(signal.SIGTERM)
        output = worker.output()
        assert worker.proc.returncode == 0, output
        assert "Traceback" not in output, output
    # a subscription's task id ends with the entry id (<ms>-<seq>)
    by_event = {"-".join(s["attributes"]["messaging.message.id"].split("-")[-2:]): s
                for s in read_spans(span_file) if s["kind"] == "SpanKind.CONSUMER"}
    assert set(by_event) == {entry, foreign}
    assert by_event[entry]["context"]["trace_id"] == "0x" + format(request.get_span_context().trace_id, "032x")
    assert by_event[entry]["parent_id"] == "0x" + format(producer.context.span_id, "016x")
    assert by_event[foreign]["parent_id"] is None
