"""The skill file is true: every command of its examples runs, as written, against the local shop
and exits as it says; ``webagent skill`` prints it and ``skill install`` copies it."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from webagent.shell.cli import skill_text
from webagent.testing.offline import PROFILE_MODELS

from .conftest import REPO, Shell

pytestmark = pytest.mark.e2e


def examples() -> list[tuple[str, int]]:
    """The example commands of SKILL.md, each with the exit code its comment gives (0 without)."""
    blocks = re.findall(r"```sh\n(.*?)```", skill_text(), re.DOTALL)
    lines = [line for block in blocks for line in block.splitlines() if line.strip()]
    return [(line, int(m.group(1)) if (m := re.search(r"# exit (\d)", line)) else 0) for line in lines]


def test_the_skill_is_short_and_in_the_agent_skills_format() -> None:
    text = skill_text()
    assert text.startswith("---\nname: webagent\ndescription: ")
    assert len(text.split()) < 900
    assert len(examples()) >= 10


def test_every_example_of_the_skill_runs_as_written(shell: Shell, shop_url: str, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "webagent"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m webagent "$@"\n')
    shim.chmod(0o755)
    (tmp_path / "items.schema.json").write_text(json.dumps({"type": "object", "required": ["items"]}))
    env = dict(shell.env, PATH=f"{bin_dir}:{os.environ['PATH']}", SITE=shop_url)
    for role in ("policy", "localizer", "validator"):
        env[f"WEBAGENT_{role.upper()}_BASE_URL"] = f"{shell.model_url}/{role}/v1"
        env[f"WEBAGENT_{role.upper()}_MODEL"] = PROFILE_MODELS["holo1.5"]
        env[f"WEBAGENT_{role.upper()}_API_KEY"] = "offline"
    env["WEBAGENT_LOCALIZER_PROFILE"] = "holo1.5"
    env["WEBAGENT_BROWSER_PRIVATE_NETWORK"] = "allow"
    for line, expected in examples():
        done = subprocess.run(["sh", "-c", line], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
        assert done.returncode == expected, (line, done.stdout, done.stderr)


def test_skill_prints_it_and_install_copies_it(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    shown = subprocess.run(
        [sys.executable, "-m", "webagent", "skill"], env=env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0 and shown.stdout == skill_text()
    done = subprocess.run(
        [sys.executable, "-m", "webagent", "skill", "install", "--dir", str(tmp_path / "skills")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    target = tmp_path / "skills" / "webagent" / "SKILL.md"
    assert done.returncode == 0 and done.stdout.strip() == str(target)
    assert target.read_text() == skill_text() and stat.S_ISREG(target.stat().st_mode)
