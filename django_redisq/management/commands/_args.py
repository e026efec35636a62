"""The option types the two commands share (``runworker``, ``redisq``): each refuses a bad value with one line.

argparse turns an ``ArgumentTypeError`` into ``error: argument --x: <the message>``
and exit status 2, before anything touches Redis.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def positive(value: str) -> int:
    """A whole number, 1 or more."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def non_negative(kind: type) -> Callable[[str], Any]:
    """A number of ``kind`` (``int`` or ``float``), 0 or more."""
    def parse(value: str) -> Any:
        try:
            n = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
        if not 0 <= n < float("inf"):
            raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
        return n

    return parse


def port(value: str) -> int:
    """A TCP port: 0 (any free one) to 65535."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {value!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 (any free one) to 65535, got {n}")
    return n


def memory(value: str) -> int:
    """A size in bytes: ``1048576``, ``512K``, ``256M``, ``2G`` (binary units), at least 1M."""
    text = value.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    digits = text[:-1] if scale > 1 else text
    try:
        n = float(digits) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a size such as 512M or 2G, got {value!r}") from None
    if not 2**20 <= n < float("inf"):
        raise argparse.ArgumentTypeError(f"must be at least 1M (a child's own interpreter takes more), got {value!r}")
    return int(n)
