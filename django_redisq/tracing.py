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
"""

from __future__ import annotations

import sys
import time
from typing import Any

SYSTEM = "redisq"
"""``messaging.system``: this queue, not the Redis server it stores tasks in."""
TRACE_KEY = "_trace"
"""The reserved metadata key holding the producer's trace context (a dict of the propagator's fields)."""
FIELD_MAX = 512
"""Characters a propagated field may have; longer ones (a large baggage) are left out of the message."""
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


class _Noop:
    """What ``send`` and ``process`` return when tracing is off: every method does nothing."""

    carrier: dict[str, str] | None = None

    def __enter__(self) -> _Noop:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def identify(self, ids: list[str]) -> None:
        return None

    def end(self, outcome: str, exc: BaseException | None = None) -> None:
        return None


NOOP = _Noop()


def _attributes(queue: str, task_name: str, operation: str) -> dict[str, Any]:
    return {"messaging.system": SYSTEM, "messaging.destination.name": queue, "messaging.operation.type": operation,
            "messaging.operation.name": operation, "messaging.redisq.task.name": task_name}


class Sending:
    """The PRODUCER span of one enqueue call (one task, or a batch of one task's calls)."""

    def __init__(self, found: Any, task_name: str, queue: str) -> None:
        from opentelemetry import propagate, trace

        self._trace = trace
        self.span = found.start_span(f"send {queue}", kind=trace.SpanKind.PRODUCER, attributes=_attributes(queue, task_name, "send"))
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self.span))
        self.carrier = {k: v for k, v in carrier.items() if isinstance(v, str) and len(v) <= FIELD_MAX} or None

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


def send(task_name: str, queue: str) -> Sending | _Noop:
    """The producer span of an enqueue (``NOOP`` when tracing is off); ``.carrier`` goes into the task's metadata."""
    found = tracer()
    return NOOP if found is None else Sending(found, task_name, queue)


def with_trace(metadata: dict[str, Any] | None, carrier: dict[str, str] | None) -> dict[str, Any] | None:
    """The task's metadata with the trace context under ``TRACE_KEY`` (unchanged when there is none)."""
    if not carrier:
        return metadata
    return {**(metadata or {}), TRACE_KEY: carrier}


class Processing:
    """The CONSUMER span of one attempt: current inside ``with``, ended by ``end`` once the outcome is known."""

    def __init__(self, found: Any, task_name: str, queue: str, task_id: str, attempt: int, metadata: dict[str, Any]) -> None:
        from opentelemetry import context, propagate, trace

        self._trace, self._context = trace, context
        carrier = metadata.get(TRACE_KEY) if isinstance(metadata, dict) else None
        parent = propagate.extract(carrier) if isinstance(carrier, dict) else None
        attributes = {**_attributes(queue, task_name, "process"), "messaging.message.id": task_id, "messaging.redisq.attempt": attempt}
        self.span = found.start_span(f"process {queue}", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes)
        self._token: Any = None
        self._ended = False

    def __enter__(self) -> Processing:
        self._token = self._context.attach(self._trace.set_span_in_context(self.span))
        return self

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


def process(task_name: str, queue: str, task_id: str, attempt: int, metadata: dict[str, Any]) -> Processing | _Noop:
    """The consumer span of one attempt (``NOOP`` when tracing is off), continuing the trace in ``metadata``."""
    found = tracer()
    return NOOP if found is None else Processing(found, task_name, queue, task_id, attempt, metadata)
