"""OpenTelemetry traces across the queue: a PRODUCER span per enqueue, a CONSUMER span per attempt, one trace.

Optional (``pip install "django-redisq[otel]"``: ``opentelemetry-api`` only; the SDK
and its exporters are the project's). Tracing is on when the process has a tracer
provider configured, the way every OpenTelemetry instrumentation decides:

- **Off costs nothing.** Until the project imported ``opentelemetry.trace`` and set a
  provider (``trace.set_tracer_provider(...)``, or ``opentelemetry-instrument``),
  this module never imports OpenTelemetry: each enqueue and each attempt asks
  ``sys.modules`` once and goes on (``NOOP``).
- **Enqueue** (``send``): one span of kind PRODUCER, ``send <queue>``, around the
  enqueue script, and the W3C trace context of that span (``traceparent``,
  ``tracestate``; through the configured propagator, so baggage too) stored in the
  task's metadata under the reserved key ``"_trace"`` (backends' keys start with
  ``_``; Django hides them from ``TaskResult.metadata``). It travels in the
  message, so every attempt of the task, on any worker, reads the same context.
- **Each attempt** (``process``): one span of kind CONSUMER, ``process <queue>``,
  current while the task runs, so the spans the task makes (queries, HTTP calls)
  are its children. Its **parent is the producer span** (the creation context):
  the OpenTelemetry messaging conventions let a consumer span that processes a
  single message use the message's creation context as its parent (a batch
  receiver would link to several instead), and a task is one message processed on
  its own. So the request that enqueued the task and every attempt of it are one
  trace, which is what one looks for ("what did this checkout cause?"). The
  price: a task run hours later (``run_after``, a long backoff) makes that trace
  long; a retry is a sibling of the first attempt, not its child.

Attributes, per the messaging conventions: ``messaging.system`` = ``"redisq"`` (this
queue, not Redis: Redis is the store, the messaging system is ours, as Celery's
instrumentation says ``celery``), ``messaging.destination.name`` = the queue (the
logical name, a partitioned queue's too), ``messaging.message.id`` = the task id,
``messaging.operation.type`` = ``send`` / ``process``; and ours under
``messaging.redisq.*``: ``task.name`` (the dotted path), ``attempt`` (1 for the
first delivery), ``outcome`` (``success``, ``retry``, ``dead``). A failed attempt's
exception is recorded on its span (``record_exception``) and its status is ERROR.

Workflows and events carry the context through their steps:

- **A workflow** (``chain``, ``group``, ``chord``) is created in one PRODUCER
  span, ``send <queue>`` (``send`` alone when its steps are on several queues, as
  the conventions name a span without one destination), with
  ``messaging.redisq.workflow.id`` and the number of steps as
  ``messaging.batch.message_count``. One span, not one per step: a chord of
  10,000 members is one act of the view, and one span is what it costs (a call
  with ``using(depends_on=...)`` is in its enqueue's span, ``send``). Its
  context is stored in every step's spec (``_trace``), those queued now and those
  the worker queues later from their spec, so each step's CONSUMER span is its
  child: the view, the workflow and every step are one trace. A step queued by
  the worker that settled its (last) parent also **links** to that parent's
  consumer span (the traceparent under ``LINK_KEY``): the link says which
  attempt released it, the parent says who asked for it. An ``on_error``
  callback links to the attempt that failed for good.
- **An event** is published in a PRODUCER span ``send <topic>`` (destination:
  the topic; ``messaging.message.id``: the entry id) whose context is stored in
  the stream entry's field ``tc`` (JSON of the propagator's fields); the pump puts
  it in each subscriber task's ``_trace``, so every subscriber's attempt is a child
  of the publish. A carrier that is not a JSON object of short strings (another
  producer's, a damaged one) is left out: the event becomes its task all the same.

Off, none of it writes a byte: no ``_trace`` in a spec, no ``tc`` in an entry.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

SYSTEM = "redisq"
"""``messaging.system``: this queue, not the Redis server it stores tasks in."""
TRACE_KEY = "_trace"
"""The reserved metadata key holding the producer's trace context (a dict of the propagator's fields)."""
FIELD_MAX = 512
"""Characters a propagated field may have; longer ones (a large baggage) are left out of the message."""
FIELDS_MAX = 8
"""Propagated fields a carrier may have (traceparent, tracestate, baggage, ...); those past it are left out."""
LINK_KEY = "_trace_link"
"""The reserved metadata key of a workflow step queued by a worker: the traceparent of the attempt that released it."""
INSTRUMENTATION = "django_redisq"

provider_override: Any = None
"""A tracer provider to use instead of the global one (tests of one process, a project that keeps its own)."""
RECHECK = 1.0
"""Seconds a "no provider configured" answer is kept when OpenTelemetry is imported (by redis-py, say) but not set up."""

_override: tuple[Any, Any] | None = None  # (provider_override, its tracer)
_global: Any = None  # the global provider's tracer, once it is a real provider (it can be set only once)
_off_until = 0.0  # monotonic time until which the global provider is known to be the API's placeholder


def tracer() -> Any:
    """The tracer of the configured provider, or None when tracing is off (and then nothing was imported).

    The global provider can be set once only: once it is a real one, its tracer is
    kept. Until then the API's placeholder is looked up at most once per ``RECHECK``
    seconds, so an enqueue in a process that imports OpenTelemetry without
    configuring it pays for a clock read, not a provider lookup.
    """
    global _override, _global, _off_until
    provider = provider_override
    if provider is not None:
        if _override is None or _override[0] is not provider:
            _override = (provider, provider.get_tracer(INSTRUMENTATION))
        return _override[1]
    if _global is not None:
        return _global
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    now = time.monotonic()
    if now < _off_until:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, _placeholders(trace)):
        _off_until = now + RECHECK
        return None
    _global = provider.get_tracer(INSTRUMENTATION)
    return _global


def _placeholders(trace: Any) -> tuple[type, ...]:
    return (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


class Noop:
    """What ``send`` and ``process`` return when tracing is off: every method does nothing."""

    carrier: dict[str, str] | None = None
    traceparent = ""

    def __enter__(self) -> Noop:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def identify(self, ids: list[str]) -> None:
        return None

    def end(self, outcome: str, exc: BaseException | None = None) -> None:
        return None


NOOP = Noop()


def _messaging(destination: str | None, operation: str) -> dict[str, Any]:
    """The conventions' attributes of every span here (no destination: a workflow's steps on several queues)."""
    out: dict[str, Any] = {"messaging.system": SYSTEM, "messaging.operation.type": operation, "messaging.operation.name": operation}
    if destination is not None:
        out["messaging.destination.name"] = destination
    return out


def _attributes(queue: str, task_name: str, operation: str) -> dict[str, Any]:
    return {**_messaging(queue, operation), "messaging.redisq.task.name": task_name}


class Sending:
    """The PRODUCER span of one enqueue call (one task, or a batch of one task's calls), a workflow, or a publish."""

    def __init__(self, found: Any, name: str, attributes: dict[str, Any], parent: Any = None) -> None:
        from opentelemetry import propagate, trace  # the optional extra (tracing): imported once traces are on

        self._trace = trace
        self.span = found.start_span(name, context=parent, kind=trace.SpanKind.PRODUCER, attributes=attributes)
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self.span))
        self.carrier = clean_carrier(carrier)

    def identify(self, ids: list[str]) -> None:
        if len(ids) == 1:
            self.span.set_attribute("messaging.message.id", ids[0])
        else:
            self.span.set_attribute("messaging.batch.message_count", len(ids))

    def __enter__(self) -> Sending:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.span.record_exception(exc)
            self.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:300]))
        self.span.end()


def send(task_name: str, queue: str) -> Sending | Noop:
    """The producer span of an enqueue (``NOOP`` when tracing is off); ``.carrier`` goes into the task's metadata."""
    found = tracer()
    return NOOP if found is None else Sending(found, f"send {queue}", _attributes(queue, task_name, "send"))


def send_workflow(workflow_id: str, queues: list[str], steps: int) -> Sending | Noop:
    """The producer span of a workflow's creation (``NOOP`` when off); ``.carrier`` goes into every step's spec."""
    found = tracer()
    if found is None:
        return NOOP
    one = len(set(queues)) == 1
    attributes = {**_messaging(queues[0] if one else None, "send"), "messaging.redisq.workflow.id": workflow_id}
    if steps > 1:
        attributes["messaging.batch.message_count"] = steps
    return Sending(found, f"send {queues[0]}" if one else "send", attributes)


def current_context() -> Any:
    """The active context when tracing is on (kept by ``publish_on_commit`` for the publish at the commit), else None."""
    if tracer() is None:
        return None
    from opentelemetry import context  # the optional extra (tracing): imported once traces are on

    return context.get_current()


def publish(topic: str, parent: Any = None) -> Sending | Noop:
    """The producer span of an event's publish (``NOOP`` when off), child of ``parent`` (None: the current context);
    ``.carrier`` goes into the entry's field ``tc`` (``carrier_json``), ``identify`` names the entry."""
    found = tracer()
    if found is None:
        return NOOP
    return Sending(found, f"send {topic}", _messaging(topic, "send"), parent)


def clean_carrier(value: Any) -> dict[str, str] | None:
    """The usable part of a carrier read from a message or an entry: at most ``FIELDS_MAX`` string fields of at most
    ``FIELD_MAX`` characters (None: nothing usable). Whatever another producer wrote, the result is safe to extract."""
    if not isinstance(value, dict):
        return None
    kept = {k: v for k, v in value.items() if isinstance(k, str) and 0 < len(k) <= 64 and isinstance(v, str) and len(v) <= FIELD_MAX}
    return dict(list(kept.items())[:FIELDS_MAX]) or None


def carrier_json(carrier: dict[str, str] | None) -> str:
    """A carrier as one stream field's value (``""``: none, and then no field is written)."""
    return json.dumps(carrier, separators=(",", ":")) if carrier else ""


def carrier_from_json(text: str) -> dict[str, str] | None:
    """The carrier of a stream entry's ``tc`` field; None for none, or for one that is not JSON (never raises)."""
    if not text or len(text) > FIELDS_MAX * (FIELD_MAX + 80):
        return None
    try:
        return clean_carrier(json.loads(text))
    except (ValueError, RecursionError):  # not JSON; nested past the parser's depth
        return None


def with_trace(metadata: dict[str, Any] | None, carrier: dict[str, str] | None) -> dict[str, Any] | None:
    """The task's metadata with the trace context under ``TRACE_KEY`` (unchanged when there is none)."""
    if not carrier:
        return metadata
    return {**(metadata or {}), TRACE_KEY: carrier}


class Processing:
    """The CONSUMER span of one attempt: current inside ``with``, ended by ``end`` once the outcome is known."""

    def __init__(self, found: Any, task_name: str, queue: str, task_id: str, attempt: int, metadata: dict[str, Any]) -> None:
        from opentelemetry import context, propagate, trace  # the optional extra (tracing): imported once traces are on

        self._trace, self._context = trace, context
        carrier = clean_carrier(metadata.get(TRACE_KEY)) if isinstance(metadata, dict) else None
        parent = propagate.extract(carrier) if carrier else None
        attributes = {**_attributes(queue, task_name, "process"), "messaging.message.id": task_id, "messaging.redisq.attempt": attempt}
        links = _links(metadata.get(LINK_KEY) if isinstance(metadata, dict) else None)
        self.span = found.start_span(f"process {queue}", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes,
                                     links=links)
        self._token: Any = None
        self._ended = False

    def __enter__(self) -> Processing:
        self._token = self._context.attach(self._trace.set_span_in_context(self.span))
        return self

    @property
    def traceparent(self) -> str:
        """This span's context as a W3C traceparent (what a step it releases links to)."""
        c = self.span.get_span_context()
        return f"00-{c.trace_id:032x}-{c.span_id:016x}-{int(c.trace_flags):02x}" if c.is_valid else ""

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            self._context.detach(self._token)
            self._token = None

    def end(self, outcome: str, exc: BaseException | None = None) -> None:
        """Record the attempt's ``outcome`` (and its exception: status ERROR) and end the span, once."""
        if self._ended:
            return
        self._ended = True
        self.span.set_attribute("messaging.redisq.outcome", outcome)
        if exc is not None:
            self.span.record_exception(exc)
            self.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:300]))
        self.span.end()


def process(task_name: str, queue: str, task_id: str, attempt: int, metadata: dict[str, Any]) -> Processing | Noop:
    """The consumer span of one attempt (``NOOP`` when tracing is off), continuing the trace in ``metadata``."""
    found = tracer()
    return NOOP if found is None else Processing(found, task_name, queue, task_id, attempt, metadata)


def _links(value: Any) -> list[Any] | None:
    """The link to the attempt that released a workflow step (a traceparent; anything else: no link)."""
    if not isinstance(value, str) or not 0 < len(value) <= 64:
        return None
    from opentelemetry import trace  # the optional extra (tracing): imported once traces are on
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # the optional extra (tracing): imported once traces are on

    found = trace.get_current_span(TraceContextTextMapPropagator().extract({"traceparent": value})).get_span_context()
    return [trace.Link(found, {"messaging.redisq.link": "released_by"})] if found.is_valid else None
