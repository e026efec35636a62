"""The Lua scripts, one atomic step each, loaded from package data once."""

from __future__ import annotations

from functools import cache
from importlib import resources

NAMES = (
    "enqueue",
    "fetch",
    "ack",
    "retry",
    "bury",
    "promote",
    "reap",
    "release",
    "heartbeat",
    "replay",
    "purge",
    "scan_dead",
    "move_in",
)


@cache
def source(name: str) -> str:
    """The text of ``scripts/<name>.lua``."""
    return resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
