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
