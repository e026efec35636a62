"""One clock: every time django_redisq stores is Redis's, in milliseconds; this turns one into an aware datetime.

Workers, producers and the admin may sit on machines whose clocks disagree, so a
task's times (enqueued, started, died, a schedule's ticks) are all read from the
Redis server (``TIME``, or inside a script) and stored as integer milliseconds.
Shown to a person or put in a ``TaskResult`` they become UTC datetimes here, the
one converter the package has.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django_redisq.compat import UTC


def ms_to_datetime(ms: Any) -> datetime | None:
    """Redis milliseconds (an int or its text) as a UTC datetime; ``None`` for none (0, '', missing) and for
    anything that is not a time (text another producer wrote, a negative or a year past 9999): shown, never raised."""
    try:
        value = int(ms)
        return datetime.fromtimestamp(value / 1000, tz=UTC) if value > 0 else None
    except (TypeError, ValueError, OverflowError, OSError):
        return None
