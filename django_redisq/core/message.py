"""The message schema (version 1): what a task call looks like in Redis.

A message is a compact JSON object holding the call's arguments::

    {"v": 1, "args": [42], "kwargs": {}}

plus ``"o": {"max_retries": 0, ...}`` when ``task.using(...)`` changed an option of
``OVERRIDES`` for this call (so the worker honours it), and ``"m": {...}`` for the
task's metadata where Django has it (``Task.metadata``: what the task was
enqueued with; metadata saved later goes to the hash's ``metadata`` field, which
wins, see core/metadata.py).

The task's dotted path is the task hash's ``task`` field and the queue is the
one whose keys hold it, so a message of a small call stays under Redis's 64-byte
limit for compactly encoded hashes. A message may also name ``task``,
``queue``, ``backend`` and ``priority`` itself (producers of other versions);
those win over the hash and are type-checked. ``task`` names a *registered*
task: a worker never imports a path it finds in Redis. Decoding failures raise
``BadMessage`` with a reason code that ends up on the dead letter.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from django_redisq.compat import normalize_json
from django_redisq.exceptions import BadMessage, InvalidArguments, UnknownSchema

VERSION = 1

OVERRIDES = ("max_retries", "backoff_base", "backoff_max", "timeout")
"""Task options a call may change with ``task.using(...)``; they travel in the message as ``"o"``."""

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_loads = json.loads


@dataclass(frozen=True, slots=True)
class Message:
    """A decoded task call."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str
    backend: str = "default"
    priority: int = 0
    overrides: dict[str, Any] = field(default_factory=dict)  # per-call policy from task.using(): see OVERRIDES
    metadata: dict[str, Any] = field(default_factory=dict)  # Task.metadata as enqueued ("m")


def encode(args: list[Any], kwargs: dict[str, Any], overrides: dict[str, Any] | None = None,
           metadata: dict[str, Any] | None = None) -> str:
    """The message of one call (arguments already checked by ``encode_arguments``)."""
    msg: dict[str, Any] = {"v": VERSION, "args": args, "kwargs": kwargs}
    if overrides:
        msg["o"] = overrides
    if metadata:
        msg["m"] = metadata
    return _dumps(msg)


def _check_overrides(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) - set(OVERRIDES):
        raise BadMessage("bad_message", f"message options must be an object with keys among {', '.join(OVERRIDES)}")
    for name, v in value.items():
        number = not isinstance(v, bool) and isinstance(v, int if name == "max_retries" else (int, float))
        if not number or not 0 <= v < float("inf"):
            raise BadMessage("bad_message", f"message option {name} must be a number >= 0, got {v!r}")
    return value


def encode_arguments(args: Any, kwargs: Any, limit: int) -> tuple[list[Any], dict[str, Any], int]:
    """Check that arguments survive JSON unchanged; ``InvalidArguments`` says which does not.

    Returns the arguments as they will arrive and the encoded size in bytes.
    Two changes JSON would make are decided here: a tuple (or another sequence
    that is not a str) arrives as a list with the same items, as Django's
    ``normalize_json`` makes it; ``bytes``, ``bytearray`` and ``memoryview`` are
    refused, where ``normalize_json`` would turn UTF-8 bytes into a ``str`` (and
    a bytearray into a list of ints) the task would not expect.
    """
    if args.__class__ in (tuple, list) and kwargs.__class__ is dict and _flat(args) and _flat_kwargs(kwargs):
        return _encode_flat(list(args), dict(kwargs), limit)
    try:
        if found := _binary(args) or _binary(kwargs):
            arrives = {"bytes": "a str", "bytearray": "a list of ints"}.get(found, "an error in the worker")
            raise InvalidArguments(
                f"task arguments must be JSON values, and a {found} value is not one (it would arrive as {arrives}). "
                "Pass text (data.decode(), or base64 for binary data), or store the data elsewhere and pass its id."
            )
        args, kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        text = _dumps([args, kwargs])
        size = len(text.encode("utf-8"))  # also refuses lone surrogates, which Redis cannot store as text
    except RecursionError:
        raise InvalidArguments("task arguments are nested too deeply to encode as JSON; flatten them or pass an id.") from None
    except InvalidArguments:
        raise
    except (TypeError, ValueError) as exc:
        raise InvalidArguments(
            f"task arguments must be JSON values (str, int, float, bool, None, list, dict with str keys): {exc}. "
            "Pass ids or primitive values instead of objects."
        ) from None
    _within(size, limit)
    back_args, back_kwargs = _loads(text)
    if back_args != args or back_kwargs != kwargs:
        raise InvalidArguments(
            "task arguments change when encoded as JSON (dict keys that are not strings?). "
            "Use str keys and JSON values only."
        )
    return back_args, back_kwargs, size


_ENVELOPE = len(f'{{"v":{VERSION},"args":,"kwargs":}}') - len("[,]")
"""What a message of arguments alone adds to their encoding as ``[args, kwargs]``."""


def encode_call(args: Any, kwargs: Any, limit: int, overrides: dict[str, Any] | None = None,
                metadata: dict[str, Any] | None = None) -> tuple[list[Any], dict[str, Any], str]:
    """The arguments as they will arrive and the message of the call, checked as ``encode_arguments`` checks them.

    Scalars only (the common ``.delay(order_id)``) with no options or metadata to carry are encoded once, into the
    message itself, whose size less its envelope is their encoded size (what ``limit``, MAX_MESSAGE_BYTES, bounds);
    anything else is checked by ``encode_arguments`` and then encoded."""
    if (not overrides and not metadata and args.__class__ in (tuple, list) and kwargs.__class__ is dict and _flat(args)
            and _flat_kwargs(kwargs)):
        args, kwargs = list(args), dict(kwargs)
        msg = encode(args, kwargs)
        try:
            size = len(msg.encode("utf-8")) - _ENVELOPE
        except ValueError as exc:  # UnicodeEncodeError: a lone surrogate
            raise InvalidArguments(f"task arguments must be JSON values: {exc}. Pass ids or primitive values instead of objects.") from None
        _within(size, limit)
        return args, kwargs, msg
    args, kwargs, _ = encode_arguments(args, kwargs, limit)
    return args, kwargs, encode(args, kwargs, overrides, metadata)


def _binary(value: Any) -> str:
    """The type name of the first bytes-like value in arguments (in lists, tuples and dicts, keys too), or ''."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return type(value).__name__
    if isinstance(value, dict):
        return next((found for k, v in value.items() if (found := _binary(k) or _binary(v))), "")
    if isinstance(value, (list, tuple)):
        return next((found for v in value if (found := _binary(v))), "")
    return ""


def _within(size: int, limit: int) -> None:
    if size > limit:
        raise InvalidArguments(
            f"task arguments are {size} bytes encoded; the limit is {limit} (OPTIONS['MAX_MESSAGE_BYTES']). "
            "Store large data elsewhere (a model, a file) and pass its id."
        )


_SCALARS = frozenset({str, int, bool, type(None)})


def _flat(values: Any) -> bool:
    """Whether every value is a str, int, bool, None or finite float exactly (no subclass): JSON keeps each as it is."""
    for v in values:
        kind = v.__class__
        if kind not in _SCALARS and not (kind is float and math.isfinite(v)):
            return False
    return True


def _flat_kwargs(kwargs: dict[Any, Any]) -> bool:
    return all(k.__class__ is str for k in kwargs) and _flat(kwargs.values())


def _encode_flat(args: list[Any], kwargs: dict[str, Any], limit: int) -> tuple[list[Any], dict[str, Any], int]:
    """``encode_arguments`` of scalars only, the common ``.delay(order_id)``: one encoding, no decoding back.

    Such values come back from JSON equal and of the same type, so the round trip
    the general path makes to prove it is skipped; a lone surrogate in a string
    still fails the UTF-8 size count, as there.
    """
    try:
        size = len(_dumps([args, kwargs]).encode("utf-8"))
    except ValueError as exc:  # UnicodeEncodeError: a lone surrogate
        raise InvalidArguments(f"task arguments must be JSON values: {exc}. Pass ids or primitive values instead of objects.") from None
    _within(size, limit)
    return args, kwargs, size


def decode(raw: str | bytes, task: str = "", queue: str = "") -> Message:
    """Parse a stored message; ``task`` and ``queue`` come from where it is stored.

    ``BadMessage`` or ``UnknownSchema`` on anything unexpected.
    """
    try:
        data = _loads(raw)
    except (ValueError, TypeError, RecursionError) as exc:
        raise BadMessage("bad_message", f"message is not valid JSON: {type(exc).__name__}: {exc}"[:500]) from None
    if not isinstance(data, dict):
        raise BadMessage("bad_message", f"message is a JSON {type(data).__name__}, not an object")
    version = data.get("v")
    if version != VERSION:
        raise UnknownSchema(f"message schema version {version!r} is not supported (this worker reads version {VERSION})")
    task, args, kwargs = data.get("task", task), data.get("args", []), data.get("kwargs", {})
    queue, backend, priority = data.get("queue", queue), data.get("backend", "default"), data.get("priority", 0)
    if not isinstance(task, str) or not task:
        raise BadMessage("bad_message", "message has no task name")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise BadMessage("bad_message", "message args must be a list and kwargs an object")
    if not isinstance(queue, str) or not queue or not isinstance(backend, str):
        raise BadMessage("bad_message", "message queue and backend must be strings")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise BadMessage("bad_message", "message priority must be an integer")
    overrides = _check_overrides(data["o"]) if "o" in data else {}
    metadata = data.get("m", {})
    if not isinstance(metadata, dict):
        raise BadMessage("bad_message", f"message metadata must be an object, got a JSON {type(metadata).__name__}")
    return Message(task=task, args=args, kwargs=kwargs, queue=queue, backend=backend, priority=priority,
                   overrides=overrides, metadata=metadata)


def dumps(value: Any) -> str:
    """Compact JSON for results and errors (non-JSON values are rejected, not coerced)."""
    return _dumps(value)
