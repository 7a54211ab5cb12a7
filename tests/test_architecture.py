"""The package's shape: no import cycles between its modules and no module using another's private names.

Every import counts, module-level or inside a function, ``TYPE_CHECKING`` ones too: a cycle hidden
behind a lazy import is still two modules that cannot be understood one without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "webagent"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import in the file, resolved to absolute."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [alias.name for alias in node.names]
            submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in MODULES]
            found += [(m, []) for m in submodules]  # ``from . import x``: the module x
            found.append((target, [n for n in names if f"{target}.{n}" not in MODULES]))
    return [(m, names) for m, names in found if m in MODULES and m != name]


GRAPH = {name: sorted({m for m, _ in imports_of(name, path)}) for name, path in MODULES.items()}


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def is_package_init(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def test_the_package_has_no_import_cycle() -> None:
    # A package's __init__ re-exports its modules; those modules importing their siblings through
    # the package would be a cycle too, so __init__ files are kept in the graph.
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_takes_another_modules_private_names(name: str) -> None:
    private = [
        f"{target}.{n}"
        for target, names in imports_of(name, MODULES[name])
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert private == [], f"{name} imports private names of other modules"


def test_every_feature_has_its_folder() -> None:
    top = {name.split(".")[1] for name in MODULES if name.count(".") >= 1}
    features = [
        "batch",
        "suite",
        "training",
        "env",
        "pilot",
        "pytest_plugin",
        "mcp_server",
        "shell",
        "runs",
        "cli",
        "browser",
        "model",
        "roles",
        "testing",
    ]
    for feature in features:
        assert feature in top and is_package_init(f"webagent.{feature}"), feature
