"""The wheel ships the prompts and the task sites, a non-editable install runs, and the Quickstart's
scripts install what each needs: the demo the runtime only, the tests the test extras."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_prompts_and_tasks(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    wheel = next(tmp_path.glob("webagent-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for prompt in (ROOT / "prompts").glob("*.jinja"):
        assert f"webagent/prompts/{prompt.name}" in names
    assert "webagent/testing/data/local.jsonl" in names
    assert "webagent/testing/data/scripts/demo.json" in names
    assert "webagent/testing/data/sites/catalog/index.html" in names
    # the pytest plugin: its entry point, and the extras that bring pytest-playwright (or its asyncio twin)
    wheel_zip = zipfile.ZipFile(wheel)
    info = next(n.rpartition("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    entry_points = wheel_zip.read(f"{info}/entry_points.txt").decode()
    assert "[pytest11]\nwebagent = webagent.pytest_plugin" in entry_points
    metadata = wheel_zip.read(f"{info}/METADATA").decode()
    assert "Provides-Extra: pytest\n" in metadata and "Provides-Extra: pytest-async\n" in metadata
    assert "Requires-Dist: pytest-playwright>=0.5; extra == 'pytest'" in metadata
    assert "Requires-Dist: pytest-playwright-asyncio>=0.7; extra == 'pytest-async'" in metadata
    assert "webagent/pytest_plugin/__init__.py" in names
    # A plain install of that wheel renders prompts from inside the package.
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        timeout=300,
    )
    code = (
        "import webagent.prompts as p; d = p.prompts_dir(); "
        f"assert str(d).startswith({str(target)!r}), d; print(p.render('repair.jinja', error='e', hint=''))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target)},
        cwd=tmp_path,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "could not be used: e" in out.stdout
    # ... and pytest loads its plugin through the entry point (no -p): the options are there
    help_text = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:playwright-asyncio", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(target)},
        cwd=tmp_path,
        timeout=120,
    )
    assert help_text.returncode == 0, help_text.stderr
    assert "--webagent-config=FILE" in help_text.stdout and "--webagent-cache=" in help_text.stdout


def _setup_spec(script: str) -> str:
    """What ``scripts/<script>`` has ``scripts/setup.sh`` install: its pip target (``.`` or ``.[test]``)."""
    calls = [
        line
        for line in (ROOT / "scripts" / script).read_text().splitlines()
        if "scripts/setup.sh" in line and not line.lstrip().startswith("#")
    ]
    assert len(calls) == 1, calls
    args = shlex.split(calls[0])[1:]
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh"), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "SETUP_DRY_RUN": "1"},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    match = re.fullmatch(r"pip install -e (\S+)\n", proc.stdout)
    assert match, proc.stdout
    return match[1]


def _requirement_set(spec: str, *, installed_only: bool = False) -> set[str]:
    """Every distribution ``pip install <spec>`` brings (by name): pyproject.toml's requirements for
    the spec's extras, then theirs, from the metadata installed here (no resolver, no network).
    ``installed_only`` passes over a requirement not installed here (verifiers, in a venv of its own)."""
    extras = Requirement("webagent" + spec.removeprefix(".")).extras
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"]]
    todo += [Requirement(r) for extra in sorted(extras) for r in project["optional-dependencies"][extra]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = importlib.metadata.requires(req.name) or []
        except importlib.metadata.PackageNotFoundError:
            if not installed_only:
                raise
            continue
        for text in requires:
            dep = Requirement(text)
            wanted = ["", *sorted(req.extras)]
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in wanted):
                todo.append(dep)
    return seen


def test_the_demo_installs_the_runtime_only_and_the_tests_add_their_extras() -> None:
    demo = _setup_spec("demo.sh")
    assert demo == "."
    runtime = _requirement_set(demo)
    assert {"playwright", "openai", "pydantic", "jinja2"} <= runtime
    for test_only in ("ray", "pytest", "pytest-playwright", "mypy", "ruff", "datasets", "mcp", "hypothesis"):
        assert test_only not in runtime, f"the demo's install brings {test_only}"
    tests = _requirement_set(_setup_spec("test.sh"))
    assert {"ray", "pytest", "pytest-playwright", "mypy", "ruff", "mcp"} <= tests
    assert runtime < tests
    # CI runs the README's test command.
    assert "./scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    assert "./scripts/test.sh" in (ROOT / "README.md").read_text()
    ci_lines = {line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()}
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", readme, flags=re.S)
    commands = {line.strip() for block in blocks for line in block.splitlines() if line.strip()}
    assert "./scripts/test.sh" in commands & ci_lines, "CI must run a command of the README's code blocks as written"


# What a module of the package may need beyond the runtime, and the extra that brings it.
_EXTRA_MODULES = {
    "webagent.mcp_server": "mcp",
    "webagent.serving": "mcp",  # the listeners' gate (starlette), for webagent mcp --http and env serve
    "webagent.env": "rl",
    "webagent.pytest_plugin": "pytest",
}

_IMPORT_ALL = """
import importlib, importlib.abc, importlib.metadata, json, pkgutil, sys
from packaging.utils import canonicalize_name
allowed = set(json.loads(sys.argv[1]))
blocked = {
    top for top, dists in importlib.metadata.packages_distributions().items()
    if top != "webagent" and not any(canonicalize_name(d) in allowed for d in dists)
}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
import webagent
failed = {}
for info in pkgutil.walk_packages(webagent.__path__, "webagent.", onerror=lambda name: None):
    if info.name == "webagent.__main__":
        continue
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as exc:
        failed[info.name] = ["missing", exc.name or ""]
    except Exception as exc:
        failed[info.name] = [type(exc).__name__, str(exc)]
print(json.dumps(failed))
"""


def test_a_runtime_install_imports_every_module_outside_the_extras() -> None:
    """With only what ``pip install webagent`` brings importable, every module imports (the CLI
    first: the Docker image installs the runtime only), save those of an extra, which need only
    what their extra brings or name it in a one-line error."""
    runtime = sorted(_requirement_set("."))
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, json.dumps(runtime)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    failed: dict[str, list[str]] = json.loads(proc.stdout)
    assert "webagent.cli" not in failed, failed
    for module, (kind, what) in failed.items():
        extra = next((e for prefix, e in _EXTRA_MODULES.items() if module.startswith(prefix)), None)
        assert extra is not None, f"{module} does not import with the runtime only: {kind} {what}"
        if kind == "missing":
            brought = _requirement_set(f".[{extra}]", installed_only=True)
            dist = {
                canonicalize_name(d)
                for d in importlib.metadata.packages_distributions().get(what.partition(".")[0], [])
            }
            assert dist & brought, f"{module} needs {what}, which the {extra} extra does not bring"
        else:
            assert f"webagent[{extra}]" in what, f"{module}: {kind}: {what}"
