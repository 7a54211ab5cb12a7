"""typings/: the stubs mypy reads for the libraries that ship no types (openenv-core, verifiers) say
what the libraries have: the same classes, functions and parameters, the models' fields."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from .stubcheck import check

ROOT = Path(__file__).resolve().parents[1]
TYPINGS = ROOT / "typings"


def test_the_openenv_stubs_say_what_openenv_core_has() -> None:
    assert check(TYPINGS, "openenv") == []


def test_the_fsspec_stubs_say_what_fsspec_has() -> None:
    assert check(TYPINGS, "fsspec") == []


def test_a_stub_that_drifts_from_the_library_is_found(tmp_path: Path) -> None:
    shutil.copytree(TYPINGS / "openenv", tmp_path / "openenv")
    interfaces = tmp_path / "openenv" / "core" / "env_server" / "interfaces.pyi"
    text = interfaces.read_text()
    interfaces.write_text(
        text.replace("def reset(self, seed: int | None = None,", "def reset(self, seed: int,  x: int,")
    )
    types = tmp_path / "openenv" / "core" / "env_server" / "types.pyi"
    types.write_text(types.read_text().replace("step_count: int", "steps: int").replace("class State(", "class Stat("))
    problems = check(tmp_path, "openenv")
    assert any("interfaces.Environment.reset" in p and "'x'" in p for p in problems), problems
    assert any("types.Stat: not a class" in p for p in problems), problems


@pytest.mark.slow
def test_the_verifiers_stubs_say_what_verifiers_has() -> None:
    """In the verifiers venv (scripts/setup-verifiers.sh: made on first use, then reused)."""
    made = subprocess.run(
        [str(ROOT / "scripts" / "setup-verifiers.sh")], check=True, timeout=1200, capture_output=True, text=True
    )
    python = Path(made.stdout.strip().splitlines()[-1]) / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    got = subprocess.run(
        [str(python), str(ROOT / "tests" / "stubcheck.py"), str(TYPINGS), "verifiers"],
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT / "typings",  # not the checkout: verifiers is what the venv installed
    )
    assert json.loads(got.stdout) == [], got.stdout
