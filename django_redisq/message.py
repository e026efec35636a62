"""The message schema (version 1): what a task call looks like in Redis.

A message is a compact JSON object::

    {"v": 1, "task": "shop.tasks.send_receipt", "args": [42], "kwargs": {},
     "queue": "emails", "backend": "default", "priority": 0}

``task`` names a *registered* task; a worker never imports a path it finds in
a message. Decoding failures raise ``BadMessage`` with a reason code that ends
up on the dead letter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .exceptions import BadMessage, InvalidArguments, UnknownSchema

VERSION = 1

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_loads = json.loads


@dataclass(frozen=True, slots=True)
class Message:
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    backend: str = "default"
    priority: int = 0

    def encode(self) -> str:
        return _dumps(
            {
                "v": VERSION,
                "task": self.task,
                "args": self.args,
                "kwargs": self.kwargs,
                "queue": self.queue,
                "backend": self.backend,
                "priority": self.priority,
            }
        )


def encode_arguments(args: Any, kwargs: Any, limit: int) -> tuple[list[Any], dict[str, Any], int]:
    """Check that arguments survive JSON unchanged; ``InvalidArguments`` says which does not.

    Returns the arguments as they will arrive (tuples become lists) and the
    encoded size in bytes.
    """
    from django.utils.json import normalize_json

    try:
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        text = _dumps([args, kwargs])
        size = len(text.encode("utf-8"))  # also refuses lone surrogates, which Redis cannot store as text
    except RecursionError:
        raise InvalidArguments("task arguments are nested too deeply to encode as JSON; flatten them or pass an id.") from None
    except (TypeError, ValueError) as exc:
        raise InvalidArguments(
            f"task arguments must be JSON values (str, int, float, bool, None, list, dict with str keys): {exc}. "
            "Pass ids or primitive values instead of objects."
        ) from None
    if size > limit:
        raise InvalidArguments(
            f"task arguments are {size} bytes encoded; the limit is {limit} (OPTIONS['MAX_MESSAGE_BYTES']). "
            "Store large data elsewhere (a model, a file) and pass its id."
        )
    back_args, back_kwargs = _loads(text)
    if back_args != args or back_kwargs != kwargs:
        raise InvalidArguments(
            "task arguments change when encoded as JSON (dict keys that are not strings?). "
            "Use str keys and JSON values only."
        )
    return back_args, back_kwargs, size


def decode(raw: str | bytes) -> Message:
    """Parse a stored message; ``BadMessage`` or ``UnknownSchema`` on anything unexpected."""
    try:
        data = _loads(raw)
    except (ValueError, TypeError) as exc:
        raise BadMessage("bad_message", f"message is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadMessage("bad_message", f"message is a JSON {type(data).__name__}, not an object")
    version = data.get("v")
    if version != VERSION:
        raise UnknownSchema(f"message schema version {version!r} is not supported (this worker reads version {VERSION})")
    task, args, kwargs = data.get("task"), data.get("args", []), data.get("kwargs", {})
    queue, backend, priority = data.get("queue"), data.get("backend", "default"), data.get("priority", 0)
    if not isinstance(task, str) or not task:
        raise BadMessage("bad_message", "message has no task name")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise BadMessage("bad_message", "message args must be a list and kwargs an object")
    if not isinstance(queue, str) or not isinstance(backend, str):
        raise BadMessage("bad_message", "message queue and backend must be strings")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise BadMessage("bad_message", "message priority must be an integer")
    return Message(task=task, args=args, kwargs=kwargs, queue=queue, backend=backend, priority=priority)


def dumps(value: Any) -> str:
    """Compact JSON for results and errors (non-JSON values are rejected, not coerced)."""
    return _dumps(value)
