"""The URL schemes REDIS_URL accepts: Redis's and Valkey's names for the same wire.

Valkey speaks the Redis protocol, and its clients and managed services hand out
``valkey://`` and ``valkeys://`` URLs (TLS). redis-py reads ``redis://``,
``rediss://`` and ``unix://`` only, so a Valkey URL is rewritten to its Redis twin
at the one place a URL becomes a connection (``clients.pool_kwargs``), and the
checks (settings/read.py E006, topology.py) ask this module what a scheme means.
A leaf: no Redis, no Django.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

WIRE = {"redis": "redis", "rediss": "rediss", "valkey": "redis", "valkeys": "rediss", "unix": "unix"}
"""Each accepted scheme and the scheme redis-py reads for it."""
TLS = frozenset(s for s, wire in WIRE.items() if wire == "rediss")
"""The schemes that connect over TLS."""
NAMED = "redis://, rediss://, valkey://, valkeys:// or unix://"
"""The accepted schemes as a message names them."""


def scheme_of(url: Any) -> str | None:
    """The URL's scheme, lower-cased (RFC 3986 says it is case-insensitive), or None if ``url`` is no URL."""
    if not isinstance(url, str):
        return None
    try:
        return urlsplit(url).scheme.lower()
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return None


def accepted(url: Any) -> bool:
    """Whether REDIS_URL may be ``url``: a string of one of the schemes of ``WIRE``."""
    return scheme_of(url) in WIRE


def wire_url(url: str) -> str:
    """``url`` as redis-py reads it: ``valkey://`` becomes ``redis://``, ``valkeys://`` ``rediss://``; others as given."""
    scheme = scheme_of(url)
    if scheme in ("valkey", "valkeys"):
        return f"{WIRE[scheme]}{url[len(scheme):]}"
    return url
