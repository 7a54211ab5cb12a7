"""The wheel ships the prompts and the task sites, and a non-editable install runs."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

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
    assert "webagent/tasks/local.jsonl" in names
    assert "webagent/tasks/scripts/demo.json" in names
    assert "webagent/tasks/sites/catalog/index.html" in names
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
