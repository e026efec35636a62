"""The house rules of issue 37, held by a test: sizes, the package root, private names, the layers, lazy imports.

Each rule reads the source (``ast``, ``tokenize``) and lists every breach in
its failure, so a red run names the rooms to open. No rule imports the
package: a module too big to import cleanly is still measured.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

# the house is the source tree's, not a Python's: the newest lane holds it; 3.10 (the oldest lane) has no tomllib
tomllib = pytest.importorskip("tomllib", reason="the house rules read pyproject.toml with tomllib (Python 3.11+)")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_redisq"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
MAX_ROOT_MODULES = 12
MAX_TESTS_ROOT_FILES = 8

ALLOWED_PRIVATE = {
    "_exit": "os._exit: the standard library's way out of a forked child without running the parent's cleanup",
    "_SubParsersAction": "argparse's class of a subparsers action: argparse names it nowhere else",
    "_actions": "argparse offers no public walk of a parser's actions (management/commands/redisq.py resets their defaults)",
    "_meta": "Django's public model options (Model._meta), private in name only",
    "_make": "a named tuple's public API (the underscore keeps it apart from the fields)",
    "_live_receivers": "Django's Signal has no public split of its sync and async receivers; asend would cost each aenqueue a "
                       "thread hop (store/broker/async_broker.py send_enqueued)",
    "_replace": "a named tuple's public API (the underscore keeps it apart from the fields)",
    "_asdict": "a named tuple's public API (the underscore keeps it apart from the fields)",
    "_fields": "a named tuple's public API (the underscore keeps it apart from the fields)",
}
"""Private-looking names of other modules that code may use, each with the reason it may."""


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "migrations" not in p.parts or p.name == "__init__.py")


def dotted(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def where(path: Path, line: int | None = None) -> str:
    return f"{path.relative_to(ROOT)}" + (f":{line}" if line is not None else "")


@cache
def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def test_no_module_is_over_400_lines() -> None:
    over = {where(p): n for p in modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines: {over}"


def test_no_function_is_over_60_lines() -> None:
    over = {}
    for path in modules():
        for node in ast.walk(tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = (node.end_lineno or node.lineno) - first + 1
                if length > MAX_FUNCTION_LINES:
                    over[f"{where(path, node.lineno)} {node.name}"] = length
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines: {over}"


def test_the_package_root_holds_at_most_12_modules() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the package root: {root}"


def test_the_tests_root_holds_at_most_8_python_files() -> None:
    root = sorted(p.name for p in (ROOT / "tests").glob("*.py"))
    assert len(root) <= MAX_TESTS_ROOT_FILES, f"{len(root)} .py files at the root of tests/: {root}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(module: ast.Module) -> set[str]:
    """Every private name this module defines: functions, classes, attributes it assigns, slots, fields."""
    own: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _private(node.value):
            own.add(node.value)  # __slots__ entries, setattr/getattr of its own attributes
    return {n for n in own if _private(n)}


def private_uses(path: Path) -> Iterator[str]:
    """``obj._name`` where obj is not self/cls and the module does not define ``_name``; ``from m import _name``."""
    module = tree(path)
    own = _own_names(module)
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if _private(alias.name) and alias.name not in ALLOWED_PRIVATE:
                    yield f"{where(path, node.lineno)} from {node.module} import {alias.name}"
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in ALLOWED_PRIVATE:
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if node.attr in own:
                continue  # its own name, on another instance of its own class (e.g. ``other._key`` in ``__eq__``)
            yield f"{where(path, node.lineno)} {ast.unparse(node)}"


def test_no_module_uses_another_modules_private_names() -> None:
    uses = [use for path in modules() for use in private_uses(path)]
    assert not uses, "private names used across modules:\n" + "\n".join(uses)


def layers_contract() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["type"] == "layers")


def layer_names() -> list[list[str]]:
    """The layers, top to bottom, each as the module names it lists (``a | b`` and ``a : b`` alike)."""
    return [[name.strip() for name in layer.replace("|", ":").split(":")] for layer in layers_contract()["layers"]]


def test_every_module_is_named_by_a_layer() -> None:
    named = {f"django_redisq.{name}" for layer in layer_names() for name in layer}
    containers = {f"django_redisq.{name}" for name in layers_contract().get("exhaustive_ignores", [])}
    unnamed = []
    for path in modules():
        name = dotted(path)
        if name == "django_redisq" or name in containers:
            continue
        if not any(name == n or name.startswith(n + ".") for n in named):
            unnamed.append(name)
    assert not unnamed, f"modules no layer of pyproject.toml's layers contract names: {unnamed}"


def test_every_name_of_the_layers_contract_is_a_module() -> None:
    missing = [name for layer in layer_names() for name in layer
               if not (PACKAGE / name.replace(".", "/")).with_suffix(".py").exists()
               and not (PACKAGE / name.replace(".", "/") / "__init__.py").exists()]
    assert not missing, f"the layers contract names modules that do not exist: {missing}"


def _comment_lines(path: Path) -> set[int]:
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return {tok.start[0] for tok in tokens if tok.type == tokenize.COMMENT}


def _type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def lazy_imports(path: Path) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports inside a function body (those under ``if TYPE_CHECKING:`` are for the type checker only)."""
    def walk(node: ast.AST, in_function: bool) -> Iterator[ast.Import | ast.ImportFrom]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)) and in_function:
                yield child
            yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    yield from walk(tree(path), False)


def test_every_lazy_import_says_why() -> None:
    """A comment on the import's lines or the line above it: a light import path, an optional dependency, a cycle left."""
    silent = []
    for path in modules():
        comments = _comment_lines(path)
        for node in lazy_imports(path):
            if not comments & set(range(node.lineno - 1, (node.end_lineno or node.lineno) + 1)):
                silent.append(f"{where(path, node.lineno)} {ast.unparse(node)}")
    assert not silent, "imports inside a function without a comment saying why:\n" + "\n".join(silent)
