"""docs/explanation/architecture.md's table of layers says what pyproject.toml's layers contract holds, row for row."""

from __future__ import annotations

import re

from tests.architecture.test_house import ROOT, layer_names

DOC = ROOT / "docs" / "explanation" / "architecture.md"


def doc_layers() -> list[list[str]]:
    """The modules column of the table under "The layers and their contracts", row by row, as written."""
    text = DOC.read_text()
    section = text[text.index("## The layers and their contracts"):text.index("## The map")]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith(("| layer", "|---"))]
    cells = [re.split(r"(?<!\\)\|", row)[2] for row in rows]
    return [re.findall(r"`([\w.]+)`", cell) for cell in cells]


def test_the_doc_names_the_layers_of_the_contract_top_to_bottom() -> None:
    assert doc_layers() == layer_names()


def test_every_module_the_contract_names_is_in_the_doc_and_the_other_way_round() -> None:
    in_doc = {name for layer in doc_layers() for name in layer}
    in_contract = {name for layer in layer_names() for name in layer}
    assert in_contract - in_doc == set(), "named by the contract, missing from the doc"
    assert in_doc - in_contract == set(), "in the doc, not in the contract"


def map_paths() -> list[str]:
    """Every file and folder the tree under "The map" draws, as a path from the repository root."""
    text = DOC.read_text()
    section = text[text.index("## The map"):text.index("## The packages")]
    tree = section[section.index("```") + 3:section.rindex("```")]
    paths, stack = [], []
    for line in tree.splitlines():
        found = re.match(r"^((?:│   |    )*)(?:├── |└── )(\S+)", line)
        if not found:
            continue
        depth = len(found.group(1)) // 4
        stack = [*stack[:depth], found.group(2)]
        paths.append("django_redisq/" + "".join(stack))
    return paths


def test_every_path_the_map_draws_exists() -> None:
    """A module moved, renamed or removed without the map fails here (globs: at least one file matches)."""
    missing = [p for p in map_paths() if not (list(ROOT.glob(p)) if "*" in p else (ROOT / p).exists())]
    assert not missing, f"the map draws paths that do not exist: {missing}"


def test_every_module_of_the_package_is_on_the_map() -> None:
    """A module added without a line on the map fails here (migrations are drawn as their folder, and a package's
    ``__init__.py`` by its folder's line when it has no line of its own)."""
    drawn = set(map_paths())
    drawn |= {d.rstrip("/") + "/__init__.py" for d in drawn if d.endswith("/")}
    drawn |= {d.rsplit("/", 1)[0] + "/__init__.py" for d in drawn if d.endswith(".py") and "/" in d}
    package = ROOT / "django_redisq"
    modules = {str(p.relative_to(ROOT)) for p in package.rglob("*.py") if "migrations" not in p.parts}
    undrawn = sorted(m for m in modules if m not in drawn and not any("*" in d and ROOT.joinpath(m) in ROOT.glob(d) for d in drawn))
    assert not undrawn, f"modules missing from the map in docs/explanation/architecture.md: {undrawn}"
