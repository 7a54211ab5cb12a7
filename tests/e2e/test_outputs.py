"""What ``webagent batch`` leaves on disk, through the real CLI: run folders named safely whatever
the task's id, and the outputs' permissions (private when the run holds a secret)."""

from __future__ import annotations

import json
import os
import stat
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


def webagent(server: FakeModelServer, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with the offline models, under the common umask 022 (what "the umask's" means below)."""
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", server.base_url(role)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    command = [sys.executable, "-m", "webagent", *args, *flags]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=env, umask=0o022)


def batch(
    tasks: list[dict[str, Any]], out: Path, server: FakeModelServer, *extra: str
) -> subprocess.CompletedProcess[str]:
    path = out.parent / f"{out.name}.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    return webagent(server, "batch", str(path), "--output", str(out), *extra)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes(folder: Path) -> dict[str, int]:
    """The mode of every folder and file under ``folder`` (itself too), by relative path."""
    return {str(p.relative_to(folder)): mode(p) for p in [folder, *sorted(folder.rglob("*"))]}


def private(folder: Path) -> bool:
    """Every folder under ``folder`` 0700, every file 0600."""
    found = modes(folder)
    return all(m == (0o700 if (folder / p).is_dir() else 0o600) for p, m in found.items())


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


# ---------------------------------------------------------------- who may read the outputs
#
# A run that types secrets (or holds a signed-in state, or saves one: tests/runtime/
# test_storage_state.py) writes its outputs for its owner only: folders 0700, files 0600. Without,
# the umask decides (022 here: 0755 / 0644), so that a CI job reads what a container running as
# another user wrote into a mounted folder (scripts/docker-ci.sh, docker/README.md).

SECRET = ["--secret", "TOKEN=not-used-but-set"]


def test_a_run_with_a_secret_is_its_owners_only_and_one_without_keeps_the_umask(
    models: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    tmp_path.chmod(0o755)  # (pytest makes it 0700: what is written in it would be private anyway)
    task = local_tasks["catalog-price"]
    for name, extra in (("secret", SECRET), ("plain", [])):
        out = tmp_path / name / "run"
        proc = webagent(models, "run", "--url", task["url"], "--goal", task["goal"], "--output", str(out), *extra)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert {"report.html", "result.json", "trajectory.jsonl", "step_001.jpg"} <= set(modes(out))
    assert private(tmp_path / "secret")  # the folder made for the run dir too
    plain = modes(tmp_path / "plain")
    assert all(m == (0o755 if (tmp_path / "plain" / p).is_dir() else 0o644) for p, m in plain.items()), plain


def test_a_batch_with_a_secret_is_its_owners_only_in_a_folder_of_the_hosts(
    models: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    """A CI container's output folder is mounted, made by the host (0777 in scripts/docker-ci.sh):
    it is left as it is; what is written in it is private with a secret, readable without."""
    tmp_path.chmod(0o755)
    task = local_tasks["catalog-price"]
    for name, extra in (("secret", SECRET), ("plain", [])):
        mounted = tmp_path / name
        mounted.mkdir()
        mounted.chmod(0o777)
        proc = batch([{"id": "price", "url": task["url"], "goal": task["goal"]}], mounted / "out", models, *extra)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert mode(mounted) == 0o777
    assert private(tmp_path / "secret" / "out")
    written = modes(tmp_path / "secret" / "out")
    assert {"results.jsonl", "summary.json", "runs/price/attempt-1/report.html"} <= set(written)
    plain = tmp_path / "plain" / "out"
    assert mode(plain / "results.jsonl") == mode(plain / "summary.json") == 0o644
    assert mode(plain / "runs" / "price" / "attempt-1") == 0o755
    assert mode(plain / "runs" / "price" / "attempt-1" / "step_001.jpg") == 0o644


def test_a_suite_with_a_secret_is_its_owners_only(
    models: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    tmp_path.chmod(0o755)
    task = local_tasks["catalog-price"]
    suite = tmp_path / "suite.yaml"
    suite.write_text(json.dumps({"checks": [{"name": "price", "url": task["url"], "goal": task["goal"]}]}))
    out, junit = tmp_path / "results" / "out", tmp_path / "ci" / "junit.xml"
    proc = webagent(models, "test", str(suite), "--output", str(out), "--junit", str(junit), *SECRET)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert private(tmp_path / "results")
    assert {"suite.json", "junit.xml", "report.html", "results.jsonl"} <= set(modes(out))
    assert mode(junit) == 0o600 and mode(junit.parent) == 0o700
