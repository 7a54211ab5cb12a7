"""The role vocabulary: the roles' names are listed once (``webagent.records.Role``) and imported."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

from webagent.families import Grounding
from webagent.records import ROLES, Role

PACKAGE = Path(__file__).resolve().parents[2] / "webagent"
NAMES = frozenset(get_args(Role))
#: Where the vocabulary is spelled out: the roles, and who may place a point (a subset of them).
HOMES = {PACKAGE / "records.py", PACKAGE / "families" / "contracts.py"}


def listings(path: Path) -> list[int]:
    """Lines of a tuple, list or set literal, or a ``Literal[...]``, naming two roles or more."""
    found: list[int] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
            items = node.slice.elts
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        else:
            continue
        named = {e.value for e in items if isinstance(e, ast.Constant) and e.value in NAMES}
        if len(named) >= 2:
            found.append(node.lineno)
    return found


def test_the_roles_are_listed_in_one_place() -> None:
    spelled = {
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in HOMES
        for line in listings(path)
    }
    assert not spelled, f"role names listed outside webagent/records.py; import ROLES, Role or Grounding: {spelled}"


def test_the_vocabulary_is_the_roles_and_grounding_a_subset_of_it() -> None:
    assert ROLES == ("policy", "localizer", "validator")
    assert set(get_args(Grounding)) <= set(ROLES)


def test_the_config_and_the_usage_tables_use_the_vocabulary() -> None:
    from webagent.config import ROLES as CONFIG_ROLES
    from webagent.config import AgentConfig

    assert CONFIG_ROLES is ROLES
    assert set(AgentConfig.model_fields) >= set(ROLES)
