"""The types of tasks cannot silently rot: mypy reads the examples beside this file.

``tasks_good.py`` holds what a type checker must accept (``assert_type`` on each
task, result and return value): mypy must report nothing there. ``tasks_bad.py``
holds calls it must refuse, each marked ``# E: <error code>``: mypy must report
exactly those, line by line. A signature typed ``Any`` again (``delay(*args: Any)``)
loses the errors of ``tasks_bad.py``; a wrong return type breaks an ``assert_type``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="the typing test needs mypy (the lint dependency group)")
pytest.importorskip("mypy_django_plugin", reason="the typing test needs django-stubs (the lint dependency group)")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
EXPECTED = re.compile(r"#\s*E:\s*([a-z-]+)\s*$")
REPORTED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$")


def expected_errors(path: Path) -> set[tuple[str, int, str]]:
    return {(path.name, n, m.group(1)) for n, line in enumerate(path.read_text().splitlines(), 1) if (m := EXPECTED.search(line))}


@pytest.fixture(scope="module")
def mypy_errors(tmp_path_factory: pytest.TempPathFactory) -> set[tuple[str, int, str]]:
    """Every error mypy reports on the examples, as (file name, line, code), with the project's mypy settings."""
    files = [str(HERE / "tasks_good.py"), str(HERE / "tasks_bad.py")]
    cache = tmp_path_factory.mktemp("mypy-cache")
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--show-error-codes", "--no-error-summary",
         "--no-pretty", "--hide-error-context", *files],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode in (0, 1), run.stdout + run.stderr  # 2: mypy itself failed (a crash, a bad option)
    found = set()
    for line in run.stdout.splitlines():
        m = REPORTED.match(line.strip())
        if m:
            found.add((Path(m["file"]).name, int(m["line"]), m["code"]))
        else:
            assert ": note:" in line or not line.strip(), f"unparsed mypy output: {line!r}"
    return found


def test_the_examples_mark_errors_to_expect() -> None:
    # the comparison below could not fail if the bad examples marked nothing
    assert len(expected_errors(HERE / "tasks_bad.py")) >= 10
    assert not expected_errors(HERE / "tasks_good.py")


def test_mypy_accepts_the_good_examples(mypy_errors: set[tuple[str, int, str]]) -> None:
    assert sorted(e for e in mypy_errors if e[0] == "tasks_good.py") == []


def test_mypy_refuses_each_bad_call_and_nothing_else(mypy_errors: set[tuple[str, int, str]]) -> None:
    got = {e for e in mypy_errors if e[0] == "tasks_bad.py"}
    want = expected_errors(HERE / "tasks_bad.py")
    assert sorted(want - got) == [], "mypy no longer refuses these calls (types that rotted into Any?)"
    assert sorted(got - want) == [], "mypy refuses what it should accept"
