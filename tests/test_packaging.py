"""The wheel ships the prompts and the task sites, and a non-editable install runs."""

from __future__ import annotations

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
