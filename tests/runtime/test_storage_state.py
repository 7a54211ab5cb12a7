"""Signed-in sessions that persist: ``webagent auth save`` signs in once (password and 2FA code), writes
the state 0600, and later runs start signed in; the state's cookie values never reach a record, a
log line or a model request, and a suite of 20 checks on the signed-in site makes no sign-in steps
and far fewer model calls the second time."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.teamscripts import SIGN_IN_GOAL, team_script
from webagent.testing.teamsite import OTP_CODE, PASSWORD, TeamSite

from .conftest import everything_written

pytestmark = pytest.mark.e2e

WHOAMI_GOAL = "Open the whoami page of the team site and say whose session it is"


def _script() -> dict[str, object]:
    script = team_script(items=3)
    script["tasks"].append(  # type: ignore[attr-defined]
        {
            "id": "whoami",
            "match": "Open the whoami page",
            "policy": [{"when": {"url": "/app/whoami"}, "action": {"action": "answer", "content": "ada's session"}}],
            "validator": {"accept": ["session"]},
        }
    )
    return script


@pytest.fixture
def recording() -> Iterator[FakeModelServer]:
    server = FakeModelServer(_script(), keep_raw=True)
    server.start_in_thread()
    yield server
    server.stop_thread()


def _webagent(server: FakeModelServer, *args: str, secrets: bool = True) -> subprocess.CompletedProcess[bytes]:
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline", "-vv"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", server.base_url(role)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    if secrets:
        env |= {"WEBAGENT_SECRET_PASSWORD": PASSWORD, "WEBAGENT_SECRET_OTP": OTP_CODE}
    return subprocess.run([sys.executable, "-m", "webagent", *args, *flags], capture_output=True, timeout=180, env=env)


def _private(folder: Path) -> bool:
    """Every folder under ``folder`` (itself too) 0700, every file 0600 (``webagent.files.disk``)."""
    paths = [folder, *folder.rglob("*")]
    return all(stat.S_IMODE(p.stat().st_mode) == (0o700 if p.is_dir() else 0o600) for p in paths)


def test_auth_save_signs_in_once_and_later_runs_start_signed_in(
    recording: FakeModelServer, team_site: TeamSite, tmp_path: Path
) -> None:
    state, sign_in_dir, run_dir = tmp_path / "states" / "state.json", tmp_path / "auth-run", tmp_path / "run"
    signed_in = team_site.sign_ins
    saved = _webagent(
        recording, "auth", "save", f"{team_site.url}/app/", "--goal", SIGN_IN_GOAL, "--output", str(state),
        "--run-dir", str(sign_in_dir),
    )  # fmt: skip
    assert saved.returncode == 0, saved.stderr.decode()[-2000:]
    assert b"saved to" in saved.stdout and team_site.sign_ins == signed_in + 1
    assert stat.S_IMODE(state.stat().st_mode) == 0o600  # a secret: its owner's only
    assert stat.S_IMODE(state.parent.stat().st_mode) == 0o700  # and so is the folder made for it
    assert _private(sign_in_dir)  # the sign-in's run directory: screenshots of the signed-in site
    cookies = {c["name"]: c["value"] for c in json.loads(state.read_text())["cookies"]}
    local = [i["value"] for o in json.loads(state.read_text())["origins"] for i in o["localStorage"]]
    sid = cookies["sid"]
    assert len(sid) > 20 and local and all(len(v) >= 8 for v in local)

    # A later run starts signed in: no sign-in page requested, no sign-in step.
    before = len(team_site.requests)
    run = _webagent(
        recording, "run", "--url", f"{team_site.url}/app/whoami", "--goal", WHOAMI_GOAL, "--output", str(run_dir),
        "--storage-state", str(state), "--json", secrets=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    result = json.loads(run.stdout)
    assert result["steps"] == 1 and result["success"]
    assert not [r for r in team_site.requests[before:] if r.path.startswith(("/login", "/2fa"))]
    assert "{{STORAGE_STATE}}" in result["final_url"]  # the page put the session id in its URL: redacted
    assert _private(run_dir)  # a run that holds a signed-in state: its owner's only

    # The state's values are nowhere: run directories, output, logs, model requests.
    secrets = [sid, *local, PASSWORD]
    written = everything_written(sign_in_dir, run_dir) + saved.stdout + saved.stderr + run.stdout + run.stderr
    raw = b"".join(recording.raw)
    for value in secrets:
        assert value.encode() not in written and value.encode() not in raw, value[:4]
    assert not list(sign_in_dir.rglob("*.json*")) or all(
        "cookies" not in p.read_text() for p in sign_in_dir.rglob("*.json")
    )


def test_a_failed_sign_in_saves_nothing(recording: FakeModelServer, team_site: TeamSite, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    failed = _webagent(
        recording, "auth", "save", f"{team_site.url}/app/", "--goal", SIGN_IN_GOAL, "--output", str(state),
        "--run-dir", str(tmp_path / "r"), "--max-steps", "2", secrets=True,
    )  # fmt: skip
    assert failed.returncode == 1 and not state.exists()
    assert b"nothing was saved" in failed.stderr


def test_a_state_file_that_is_not_one_is_a_clear_error(recording: FakeModelServer, tmp_path: Path) -> None:
    bad = tmp_path / "state.json"
    bad.write_text("[1, 2]")
    run = _webagent(recording, "run", "--url", "http://127.0.0.1:9/", "--goal", "g", "--storage-state", str(bad))
    assert run.returncode == 2
    assert b"is not a browser state" in run.stderr and b"webagent auth save" in run.stderr
    assert b"Traceback" not in run.stderr
