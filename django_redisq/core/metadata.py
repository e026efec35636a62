"""Task metadata (Django's metadata proposal, new-features #141), where the running Django has it.

Django's branch gives a ``Task`` a ``metadata`` dict (``using(metadata=...)``),
a ``TaskResult`` its ``raw_metadata`` (``metadata`` is the same without the
keys starting with ``"_"``, which are reserved for backends), and a running
task's ``TaskContext`` a mutable copy in ``context.metadata`` with
``save_metadata()`` / ``asave_metadata()``. A change the task made and did not
save is saved when the attempt ends, whether it succeeded or failed; metadata
that cannot be stored fails the attempt with the exception ``normalize_json``
raised (``TypeError`` for an unsupported type), as Django's ImmediateBackend does.

Where the metadata lives in Redis:

- the message's ``"m"``: what the task was enqueued with (core/message.py);
- the task hash's ``metadata`` field: what was last saved, which wins.

A worker gets both with the delivery (fetch.lua), so the context of any attempt,
in any pool, starts from what the previous attempt or an explicit save left.
An explicit ``save_metadata()`` is written at once (``save_metadata.lua``) from
wherever the task runs (a thread, the event loop, a process-pool child). The
save at the end of an attempt travels in the attempt's ``Outcome`` (across a
child's pipe too) and the worker writes it before it acks, retries or buries the
task, with the settle step's retries; it is written only while the worker still
holds the task, so a worker that was reaped cannot overwrite the metadata of the
copy running elsewhere.

Everything here is feature-detected on the classes in use: on a Django without
the proposal, results have no ``raw_metadata`` and contexts no ``metadata``, so
nothing is read, built or saved.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, cast

from django_redisq.compat import normalize_json
from django_redisq.core.message import dumps

RESERVED_PREFIX = "_"
"""Metadata keys starting with this are reserved for backends: hidden from ``metadata``, kept by saves."""


@functools.lru_cache(maxsize=256)
def has_field(cls: type, name: str) -> bool:
    """Whether the framework's dataclass ``cls`` has field ``name`` (features of a newer Django); asked per enqueue, so cached."""
    return dataclasses.is_dataclass(cls) and any(f.name == name for f in dataclasses.fields(cls))


def supported(result_class: type) -> bool:
    """Whether results of ``result_class`` carry metadata (``TaskResult.raw_metadata``)."""
    return has_field(result_class, "raw_metadata")


def stored(saved: Any, enqueued: Any) -> dict[str, Any]:
    """A task's metadata: ``saved`` (the hash's JSON, if any) wins over ``enqueued`` (the message's)."""
    if saved not in (None, ""):
        try:
            value = json.loads(saved)
        except (TypeError, ValueError):
            value = None
        return value if isinstance(value, dict) else {}
    return enqueued if isinstance(enqueued, dict) else {}


def attach(result: Any, raw: dict[str, Any]) -> None:
    """Give ``result`` its ``raw_metadata`` where its class has the field; nothing otherwise."""
    if supported(type(result)):
        object.__setattr__(result, "raw_metadata", raw)


def encode(raw: Any, limit: int) -> tuple[dict[str, Any], str]:
    """Metadata as it is stored, and its JSON: a dict with string keys and JSON values, ``limit`` bytes at most.

    Raises ``TypeError`` (not a dict, a key that is not a string, a value
    ``normalize_json`` refuses) or ``ValueError`` (too large, text Redis cannot
    store), saying what is wrong.
    """
    if not isinstance(raw, dict):
        raise TypeError(f"metadata must be a dict, got {type(raw).__name__}")
    bad = next((k for k in raw if not isinstance(k, str)), None)
    if bad is not None:
        raise TypeError(f"metadata keys must be strings, got {bad!r}")
    try:
        value = normalize_json(raw)
        text = dumps(value)
        size = len(text.encode("utf-8"))
    except RecursionError:
        raise ValueError("metadata is nested too deeply to encode as JSON") from None
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"metadata must be JSON values (str, int, float, bool, None, list, dict with str keys): {exc}") from None
    if size > limit:
        raise ValueError(f"metadata is {size} bytes as JSON; the limit is {limit} (METADATA_MAX_BYTES). "
                         "Keep ids and small values in metadata, data elsewhere.")
    return cast("dict[str, Any]", value), text


def to_save(context: Any) -> dict[str, Any] | None:
    """The raw metadata to save at the end of an attempt, or None if the task left it as it was.

    The user's keys come from ``context.metadata``; the reserved ones (``"_..."``)
    keep the values the result holds, as Django's ``TaskContext.save_metadata`` does.
    """
    user = getattr(context, "metadata", None)
    if user is None:  # a context of a Django without metadata
        return None
    result = context.task_result
    modified = getattr(context, "metadata_modified", None)
    if modified is None:
        modified = user != getattr(result, "metadata", None)
    if not modified:
        return None
    if not isinstance(user, dict):
        raise TypeError(f"context.metadata must be a dict, got {type(user).__name__}")
    raw = {k: v for k, v in getattr(result, "raw_metadata", {}).items() if k.startswith(RESERVED_PREFIX)}
    raw.update((k, v) for k, v in user.items() if not (isinstance(k, str) and k.startswith(RESERVED_PREFIX)))
    return raw
