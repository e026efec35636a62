"""Settings of a runworker process that traces: the OpenTelemetry SDK configured as a project would, in settings.

Every span the worker ends is written at once, as one JSON line, to the file named
by ``REDISQ_TEST_SPANS``, for the test to read. The exporter opens the file for each
export: a process-pool child points the descriptors it inherited at /dev/null
(worker/pools/child.py), so a file opened here, in the template, would not reach it.
"""

import os
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.worker_settings import *  # noqa: F403


class FileSpanExporter(SpanExporter):
    """Appends each span as the SDK's JSON (``ReadableSpan.to_json``), one line each."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a", encoding="utf-8") as out:
            out.writelines(span.to_json(indent=None) + "\n" for span in spans)
        return SpanExportResult.SUCCESS


_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(os.environ["REDISQ_TEST_SPANS"])))
trace.set_tracer_provider(_provider)
