"""The wiring tables of docs/explanation/architecture.md ("How the worker is wired") held against the code.

A part added to or removed from ``Parts``, a collaborator added to or taken from the call that builds it, a settle
hook added, removed or reordered, or a hook that joins another point of the settle path: each fails here until the
tables say so too.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

from django_redisq.worker import parts as parts_module
from django_redisq.worker.parts import Parts
from django_redisq.worker.settling.hooks import SettleHook

DOC = Path(__file__).resolve().parents[2] / "docs" / "explanation" / "architecture.md"
POINTS = [name for name, _ in inspect.getmembers(SettleHook, inspect.isfunction) if not name.startswith("_")]


def section() -> str:
    text = DOC.read_text()
    start = text.index("## How the worker is wired")
    return text[start:text.index("\n## ", start + 1)]


def table(header: str) -> list[list[str]]:
    """The rows of the table whose first column is headed ``header``: each cell's code spans (or the cell's text)."""
    lines = section().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |"))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append(cells)
    return rows


def spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def built(function: str) -> dict[str, tuple[str, list[str], int]]:
    """Each name ``function`` in parts.py assigns from a call: (what it calls, its keywords, its positional args)."""
    tree = ast.parse(inspect.getsource(parts_module))
    body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    found = {}
    for node in ast.walk(body):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        call = next((c for c in ast.walk(node.value) if isinstance(c, ast.Call)), None)
        if call is None:
            continue
        callee = call.func.id if isinstance(call.func, ast.Name) else ast.unparse(call.func)
        found[node.targets[0].id] = (callee, [k.arg for k in call.keywords if k.arg], len(call.args))
    return found


def test_the_parts_table_lists_every_part_in_the_order_it_is_built():
    assert [spans(row[0])[0] for row in table("part")] == [f.name for f in fields(Parts)]


def test_each_part_is_built_as_the_table_says_with_its_collaborators_by_keyword():
    calls = built("build_parts")
    for row in table("part"):
        name, (kind,), keywords = spans(row[0])[0], spans(row[1]), spans(row[2])
        callee, given, positional = calls[name]
        assert callee == kind, f"{name}: built by {callee}, the table says {kind}"
        assert given == keywords, f"{name}: built with {given}, the table says {keywords}"
        assert positional == 0, f"{name}: {positional} collaborator(s) passed by position"


def test_a_worker_has_the_parts_the_table_names(r: Any, make_worker: Any):
    worker = make_worker(burst=False, scheduler=True, events=True)
    for row in table("part"):
        name, kind = spans(row[0])[0], spans(row[1])[0]
        part = getattr(worker.parts, name)
        assert part is getattr(worker, name)
        if kind != "make_pool":  # a factory: the pool's class is the one its kind names
            assert type(part).__name__ == kind, (name, type(part).__name__)


def test_the_hooks_table_lists_the_settlers_hooks_in_order_with_the_points_each_takes_part_in(r: Any, make_worker: Any):
    hooks = make_worker().settler.hooks
    rows = table("settle hook")
    assert [spans(row[0])[0] for row in rows] == [type(h).__name__ for h in hooks]
    for row, hook in zip(rows, hooks, strict=True):
        taken = [p for p in POINTS if getattr(type(hook), p) is not getattr(SettleHook, p)]
        assert sorted(spans(row[1])) == sorted(taken), (type(hook).__name__, taken)
