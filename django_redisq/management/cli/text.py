"""What ``manage.py redisq`` prints of what Redis holds: escaped, so a stored string cannot drive the terminal.

A task's name, id, error message and traceback are whatever reached Redis (a
task's own exception text, another program writing the keys). Printed raw, an
ESC or BEL in them rewrites the operator's terminal (its title, the screen, the
colours), a carriage return or a newline forges a line, and a lone surrogate
(bytes that are not UTF-8, read with ``surrogateescape``) makes the write fail.
``printable`` writes every character ``str.isprintable`` refuses (C0 and C1
controls, ESC, DEL, lone surrogates, bidirectional overrides, line separators)
as its Python escape (``\\x1b``, ``\\u202e``, ``\\udcff``). ``--json`` needs none
of this: ``json.dumps`` escapes by itself.
"""

from __future__ import annotations

from typing import Any


def printable(value: Any, *, lines: bool = False) -> str:
    """``value`` as text with every non-printable character escaped.

    ``lines=True`` keeps ``\\n`` (a traceback, a text that is several lines by
    design) and escapes everything else in each line; otherwise a newline is
    escaped too, so one field stays on one line.
    """
    text = value if isinstance(value, str) else str(value)
    if lines:
        return "\n".join(printable(line) for line in text.split("\n"))
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"
