"""Credentials kept out of what we print: the one helper for every message that may hold a setting or a Redis error.

A password reaches a message three ways: in a URL's userinfo
(``redis://user:pw@host``, ``rediss://:pw@host``), in a URL's query
(``unix:///run/redis.sock?password=pw``, ``redis://host/0?password=pw``), or
under a key of a dict such as ``SENTINEL_KWARGS`` or a cache's ``OPTIONS``
(``{"password": "pw"}``, ``{"PASSWORD": "pw"}``); and in the text of a header or a
YAML-ish line (``Authorization: Bearer <token>``, ``secret: x``), as an error from
an HTTP client or a config loader quotes it. ``redact`` replaces each with
``***`` in a text; ``shown`` is the ``repr`` of a setting's value, masked the same
way before and after it is turned into text. The system checks (``conf.validate``,
``schedules.validate``), ``build_options``' ``ImproperlyConfigured``, the
connection's errors and the logs of Redis failures all go through them.

A leaf of the vocabulary layer: no Redis, no Django.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
_SECRET_NAME = r"[A-Za-z0-9_\-]*(?:password|passwd|passphrase|pwd|secret|token|credential|authorization)[A-Za-z0-9_\-]*"
"""Names whose value is a credential: password, ssl_password, PASSWORD, client_secret, auth_token, Authorization..."""
_SECRET_KEY = re.compile(rf"(?i){_SECRET_NAME}")

_USERINFO = re.compile(r"//([^\s]*)@")
"""``//userinfo@``: up to the last ``@`` of the word, so a password holding ``@`` or ``/`` goes too."""
_PLACEHOLDER = re.compile(r"(?:<[\w\-]+>)?(?::<[\w\-]+>)?")
"""A userinfo that is only placeholders (``:<password>``, ``<user>:<password>``): our hints' examples, not a secret."""
_PAIR = re.compile(
    rf"""(?ix)
    (?P<key>(?:(?P<q>['"]){_SECRET_NAME}(?P=q)\s*[:,]\s*  # 'password': ... (a dict), ('password', ...) (a pair)
          | \b{_SECRET_NAME}\s*[=:]\s*)                   # password=... (a query, keyword arguments); secret: x,
                                                          # Authorization: ... (a header, YAML)
            (?P<scheme>(?:bearer|basic)\s+)?)              # a header's scheme stays: Authorization: Bearer ***
    (?P<value>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s&#;,)}}\]'"]+)
    """
)
"""A secret's name followed by its value: a query parameter, a dict item, a pair in a list, a header, a YAML line."""
_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s&#;,)}\]'\"]+")
"""A bearer token wherever it appears (``Bearer eyJhbGciOi...``), with or without its header's name."""


def redact(text: str) -> str:
    """``text`` with every credential it may hold replaced by ``***`` (URL userinfo, ``password=``, ``'password': ...``,
    ``secret: ...``, ``Authorization: Bearer ...``)."""
    text = _USERINFO.sub(_userinfo, text)
    text = _PAIR.sub(_pair, text)
    return _BEARER.sub(rf"\1{MASK}", text)


def shown(value: Any) -> str:
    """``repr(value)`` for a message, with the credentials in it (at any depth) replaced by ``***``."""
    return redact(repr(_masked(value)))


def _userinfo(m: re.Match[str]) -> str:
    return m.group(0) if _PLACEHOLDER.fullmatch(m.group(1)) else f"//{MASK}@"


def _pair(m: re.Match[str]) -> str:
    value = m.group("value")
    quote = value[0] if value[0] in "'\"" else ""
    if quote and (scheme := re.match(r"(?i)(bearer|basic)\s+", value[1:])):  # 'Authorization': 'Bearer x'
        return f"{m.group('key')}{quote}{scheme.group(0)}{MASK}{quote}"
    return f"{m.group('key')}{quote}{MASK}{quote}"


def _masked(value: Any, depth: int = 0) -> Any:
    """``value`` with secret strings replaced: URLs redacted, the values of secret keys masked (dicts, pairs)."""
    if depth > 20:
        return MASK
    if isinstance(value, str):
        return _masked_str(value)
    if isinstance(value, bytes):
        return _masked_str(value.decode("utf-8", "replace")).encode()
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and _SECRET_KEY.fullmatch(k) else _masked(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and isinstance(value[0], str) and _SECRET_KEY.fullmatch(value[0]):
            items: list[Any] = [value[0], MASK]
        else:
            items = [_masked(v, depth + 1) for v in value]
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, (set, frozenset)):
        return type(value)(_masked(v, depth + 1) for v in value)
    return value


def _masked_str(text: str) -> str:
    """A string setting: the userinfo of a URL (through its last ``@``) and ``secret=value`` parameters masked."""
    head, sep, rest = text.partition("//")
    if sep and "@" in rest:
        userinfo, _, after = rest.rpartition("@")
        if not _PLACEHOLDER.fullmatch(userinfo):
            text = f"{head}//{MASK}@{after}"
    return re.sub(rf"(?i)\b({_SECRET_NAME})=[^&#]*", rf"\1={MASK}", text)
