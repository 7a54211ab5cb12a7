"""tests/slow.txt names tests that exist: an entry left behind by a renamed or removed test fails here,
so the fast tier never keeps a slow test by a stale line."""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import slow_entries

ROOT = Path(__file__).resolve().parents[1]


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
    }


def test_every_slow_entry_names_a_test() -> None:
    entries = slow_entries()
    assert entries
    stale = []
    for entry in sorted(entries):
        file, _, name = entry.partition("::")
        path = ROOT / file
        if not path.is_file() or (name and name not in _test_names(path)):
            stale.append(entry)
    assert not stale, f"tests/slow.txt names tests that do not exist: {stale}"
