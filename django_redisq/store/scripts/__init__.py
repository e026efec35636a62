"""The Lua scripts, one atomic step each, loaded from package data once.

A script may splice in a shared fragment from ``store/scripts/lib/`` with a line of
its own reading ``--! include <name>.lua``; the line is replaced by the
fragment's text when the script is loaded (fragments may include others;
each is spliced once per script). ``NAMES`` lists the callable scripts only.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

NAMES = (
    "enqueue",
    "enqueue_again",
    "fetch",
    "ack",
    "retry",
    "bury",
    "promote",
    "reap",
    "presence",
    "release",
    "heartbeat",
    "replay",
    "purge",
    "cancel",
    "scan_dead",
    "dead_window",
    "move_out",
    "move_in",
    "fire",
    "schedule_pause",
    "schedule_resume",
    "schedule_run",
    "save_metadata",
    "edit_replay",
    "pause",
    "resume",
    "progress",
    "wf_create",
    "wf_start",
    "wf_done",
    "wf_fail",
    "wf_cancel",
    "wf_adopt",
    "wf_resume",
    "wf_index",
    # events (store/topics/steps.py)
    "topic_publish",
    "topic_groups",
    "topic_read",
    "topic_claim",
    "topic_trim",
    "topic_rewind",
    "topic_prune",
    "bury_event",
    # durable tasks (store/steps/durable.py, store/topics/waiters.py)
    "step_load",
    "step_record",
    "step_clear",
    "suspend",
    "wait_register",
    "wait_wake",
    "wait_drop",
)

INCLUDE = re.compile(r"^--! include ([A-Za-z0-9_]+\.lua)[ \t]*$", re.MULTILINE)


def _splice(text: str, seen: set[str]) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1)
        if name in seen:
            return f"-- ({name} already included)"
        seen.add(name)
        body = resources.files(__package__).joinpath("lib").joinpath(name).read_text(encoding="utf-8")
        return _splice(body.rstrip("\n"), seen)

    return INCLUDE.sub(repl, text)


@cache
def source(name: str) -> str:
    """The text of ``store/scripts/<name>.lua``, its includes spliced in."""
    text = resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return _splice(text, set())
