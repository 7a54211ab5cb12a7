"""The stubs in typings/ against the libraries they describe: every class, function and method a stub
declares is there in the library, with the same parameters in the same order, and every field a
stub gives a pydantic model is one of the model's fields.

Standalone (no webagent import): ``python tests/stubcheck.py typings PACKAGE`` prints the mismatches
as JSON, so the check runs in another venv too (verifiers has its own: scripts/setup-verifiers.sh).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
from pathlib import Path


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = node.args
    names = [p.arg for p in [*a.posonlyargs, *a.args]]
    names += [f"*{a.vararg.arg}"] if a.vararg else []
    names += [p.arg for p in a.kwonlyargs]
    names += [f"**{a.kwarg.arg}"] if a.kwarg else []
    return names


def _real_params(obj: object) -> list[str]:
    kinds = {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}
    fn = obj.fget if isinstance(obj, property) else obj
    if isinstance(fn, (staticmethod, classmethod)):
        fn = fn.__func__
    if not callable(fn):
        return [f"<not callable: {type(fn).__name__}>"]
    return [kinds.get(p.kind, "") + p.name for p in inspect.signature(inspect.unwrap(fn)).parameters.values()]


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _check_def(where: str, node: ast.FunctionDef | ast.AsyncFunctionDef, real: object, problems: list[str]) -> None:
    if real is None:
        problems.append(f"{where}: not in the library")
        return
    want, got = _params(node), _real_params(real)
    if want != got:
        problems.append(f"{where}: the stub's parameters {want}, the library's {got}")


def check(root: Path, package: str) -> list[str]:
    """The mismatches between ``root/package``'s stubs and the installed ``package``."""
    problems: list[str] = []
    for path in sorted((root / package).rglob("*.pyi")):
        name = _module_name(root, path)
        module = importlib.import_module(name)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.level:  # a re-export of the package's: there too
                for alias in node.names:
                    if not hasattr(module, alias.asname or alias.name):
                        problems.append(f"{name}.{alias.asname or alias.name}: not in the library")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                _check_def(f"{name}.{node.name}", node, getattr(module, node.name, None), problems)
            elif isinstance(node, ast.ClassDef):
                cls = getattr(module, node.name, None)
                if not isinstance(cls, type):
                    problems.append(f"{name}.{node.name}: not a class in the library")
                    continue
                fields = getattr(cls, "model_fields", None)
                for item in node.body:
                    where = f"{name}.{node.name}.{getattr(item, 'name', '')}"
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        _check_def(where, item, inspect.getattr_static(cls, item.name, None), problems)
                    elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        field = item.target.id
                        if fields is not None:
                            missing = field not in fields
                        else:  # a constant of the class; an instance's attributes are set in __init__, unseen here
                            missing = field.isupper() and not hasattr(cls, field)
                        if missing:
                            problems.append(f"{name}.{node.name}.{field}: not a field of the library's class")
    return problems


if __name__ == "__main__":
    print(json.dumps(check(Path(sys.argv[1]), sys.argv[2])))
