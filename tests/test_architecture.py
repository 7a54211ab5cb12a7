"""The package's shape: no import cycles between its modules and no module using another's private names.

Every import counts, module-level or inside a function, ``TYPE_CHECKING`` ones too: a cycle hidden
behind a lazy import is still two modules that cannot be understood one without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from .layers import CORE, CYCLES, DOC, EXCEPTIONS, IMPORTS, LAYERS, layer_of, rendered_doc

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
            taken = [n for n in names if f"{target}.{n}" not in MODULES]
            if taken or not submodules:  # ``from .. import actions`` imports the module only
                found.append((target, taken))
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


# ---------------------------------------------------------------- what may import what (tests/layers.py)


def unit_of(module: str) -> str:
    """A module's unit: its folder under the package, the root module itself, or the package's __init__."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def unit_graph(graph: dict[str, list[str]]) -> dict[str, list[str]]:
    """The imports between units (a module's of its own unit left out)."""
    units: dict[str, set[str]] = {unit_of(m): set() for m in graph}
    for module, imported in graph.items():
        units[unit_of(module)] |= {unit_of(m) for m in imported} - {unit_of(module)}
    return {u: sorted(deps) for u, deps in units.items()}


def unlisted(units: dict[str, list[str]]) -> list[str]:
    """The imports between units tests/layers.py does not list, and the listed ones there are not."""
    problems: list[str] = []
    for unit, imported in sorted(units.items()):
        if unit in CORE:
            problems += [f"{unit} (a core module) imports {m}" for m in imported if m not in CORE]
            continue
        got = {"core" if m in CORE else m for m in imported}
        want = set(IMPORTS.get(unit, ()))
        problems += [f"{unit} imports {m}: not listed in tests/layers.py" for m in sorted(got - want)]
        problems += [f"{unit} is listed as importing {m}, and does not" for m in sorted(want - got)]
    return problems


def upward(units: dict[str, list[str]]) -> set[tuple[str, str]]:
    """The imports of a unit in a layer above the importer's."""
    return {(u, m) for u, imported in units.items() for m in imported if layer_of(m) < layer_of(u)}


UNITS = unit_graph(GRAPH)


def test_every_unit_is_in_one_layer_and_every_layers_unit_is_there() -> None:
    listed = [u for layer in LAYERS for u in layer]
    assert len(listed) == len(set(listed)), "a unit in two layers"
    assert sorted(set(listed)) == sorted(UNITS), "tests/layers.py's LAYERS and the package's units differ"
    assert set(IMPORTS) == set(listed) - set(CORE)


def test_every_import_between_units_is_listed_and_every_listing_is_an_import() -> None:
    assert unlisted(UNITS) == []


def test_no_unit_imports_a_layer_above_its_own_but_the_listed_exceptions() -> None:
    listed = {(e.importer, e.imported) for e in EXCEPTIONS}
    assert upward(UNITS) == listed


def test_the_circles_between_units_are_only_those_listed() -> None:
    assert cycles(UNITS) == CYCLES


def test_the_import_rules_find_what_breaks_them() -> None:
    broken = {**UNITS, "loop": [*UNITS["loop"], "browser"], "records": [*UNITS["records"], "stream"]}
    broken["roles"] = [m for m in UNITS["roles"] if m != "model"]
    found = unlisted(broken)
    assert "loop imports browser: not listed in tests/layers.py" in found
    assert "records (a core module) imports stream" in found
    assert "roles is listed as importing model, and does not" in found
    assert ("model", "loop") in upward({**UNITS, "model": [*UNITS["model"], "loop"]})
    assert cycles({**broken, "browser": [*UNITS["browser"], "loop"]}) != CYCLES


def test_the_dependency_table_of_architecture_md_is_rendered_from_the_rules() -> None:
    assert DOC.read_text(encoding="utf-8") == rendered_doc(), (
        "docs/architecture.md's dependency table is out of date: run `python -m tests.layers --write`"
    )
