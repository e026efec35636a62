"""Settings of a runworker process that traces: the OpenTelemetry SDK configured as a project would, in settings.

Every span the worker ends is written at once, as one JSON line, to the file named
by ``REDISQ_TEST_SPANS`` (the SDK's console exporter, given that file), for the test to read.
"""

import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from tests.worker_settings import *  # noqa: F403

_spans = open(os.environ["REDISQ_TEST_SPANS"], "a", encoding="utf-8")
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=_spans, formatter=lambda span: span.to_json(indent=None) + "\n")))
trace.set_tracer_provider(_provider)
