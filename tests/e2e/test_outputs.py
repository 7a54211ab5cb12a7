"""What ``webagent batch`` leaves on disk, through the real CLI: run folders named safely whatever
the task's id, and the outputs' permissions (private when the run holds a secret)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer

from ..conftest import load_task_script

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def models() -> Iterator[FakeModelServer]:
    server = FakeModelServer(load_task_script("local"))
    server.start_in_thread()
    yield server
    server.stop_thread()


def batch(
    tasks: list[dict[str, Any]], out: Path, server: FakeModelServer, *extra: str
) -> subprocess.CompletedProcess[str]:
    path = out.parent / f"{out.name}.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", server.base_url(role)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    command = [sys.executable, "-m", "webagent", "batch", str(path), "--output", str(out), *extra, *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)


def results(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def test_an_id_of_400_bytes_runs_in_a_folder_of_a_safe_name(
    models: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    """100 letters of a 4-byte script: 400 bytes, over any file system's 255 for a name. Cut by
    characters it was ``OSError: File name too long`` and the task ended ``stop_reason: error``."""
    task = local_tasks["catalog-price"]
    long_id = "\U0001d400" * 100  # MATHEMATICAL BOLD CAPITAL A: a letter, 4 bytes of UTF-8
    assert len(long_id.encode()) == 400
    out = tmp_path / "batch"
    proc = batch([{"id": long_id, "url": task["url"], "goal": task["goal"]}], out, models)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    [row] = results(out)
    assert row["id"] == long_id and row["success"] is True and row["stop_reason"] == "answered"
    run_dir = out / row["attempt_records"][0]["output_dir"]
    assert (run_dir / "result.json").is_file() and (run_dir / "report.html").is_file()
    name = run_dir.relative_to(out / "runs").parts[0]
    assert len(name.encode()) <= 255 and name.startswith("\U0001d400" * 25)
