"""Settings of a runworker process that reports to Sentry: sentry_sdk.init as a project would, in settings.

Its transport is the tests' own (a Transport subclass, as sentry-sdk's test suite collects envelopes):
every event is written at once, as one JSON line, to the file named by ``REDISQ_TEST_EVENTS``.
``REDISQ_TEST_ERROR_REPORTING`` sets ``OPTIONS["ERROR_REPORTING"]``.
"""

import json
import os
from typing import Any

import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from tests.worker_settings import *  # noqa: F403
from tests.worker_settings import TASKS

if os.environ.get("REDISQ_TEST_ERROR_REPORTING"):
    TASKS["default"]["OPTIONS"]["ERROR_REPORTING"] = os.environ["REDISQ_TEST_ERROR_REPORTING"]


class CollectingTransport(Transport):
    """Keeps what the SDK would send: each event of an envelope, as a JSON line of the file."""

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.path = os.environ["REDISQ_TEST_EVENTS"]

    def capture_envelope(self, envelope: Envelope) -> None:
        event = envelope.get_event()
        if event is not None:
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(json.dumps(event, default=str) + "\n")


sentry_sdk.init(dsn="https://public@sentry.invalid/1", transport=CollectingTransport, default_integrations=True)
