"""A task's stored error history, read whatever shape it was stored in.

Its own module, apart from the figures' shapes (records.py): the backend's
``get_result`` and the workflow reads need it in every worker and web process,
the admin's and the inspector's shapes only where those run.
"""

from __future__ import annotations

import json
from typing import Any

ERRORS_FIRST = 1
"""Attempts kept at the start of a long error history (``ERRORS_FIRST`` in store/scripts/lib/errors.lua)."""


def stored_errors(text: str | None, dropped: Any = None) -> list[dict[str, Any]]:
    """A task hash's error history as ``{"exc", "msg", "tb", "at"}`` dicts, whatever shape was stored.

    The scripts keep ``errors`` a JSON list of objects (store/scripts/lib/errors.lua), but
    another producer or an older version may have left anything: what does not decode
    is shown as text, never raised. A marker entry stands for the attempts left out
    (``errors_dropped``) after the first ``ERRORS_FIRST``.
    """
    try:
        value: Any = json.loads(text or "[]")
    except (ValueError, TypeError, RecursionError):
        value = [{"msg": "the stored error history does not decode", "tb": text or ""}]
    if not isinstance(value, list):
        value = [value]
    out: list[dict[str, Any]] = []
    for e in value:
        if not isinstance(e, dict):
            e = {"msg": e if isinstance(e, str) else json.dumps(e)}
        out.append({"exc": str(e.get("exc") or ""), "msg": str(e.get("msg") or ""), "tb": str(e.get("tb") or ""),
                    "at": e.get("at")})
    try:
        omitted = int(dropped or 0)
    except (TypeError, ValueError):
        omitted = 0
    if omitted > 0 and out:
        note = f"({omitted} attempts omitted)"
        out.insert(ERRORS_FIRST, {"exc": "", "msg": note, "tb": note, "at": None})
    return out
