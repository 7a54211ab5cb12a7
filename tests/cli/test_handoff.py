"""The CLI's human hand-off: on a terminal the question is asked and the typed answer signs the run in;
without a terminal the run ends at once with stop reason needs_human and says what it needed."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.teamscripts import item_goal, team_script
from webagent.testing.teamsite import OTP_CODE, PASSWORD, TeamSite

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def team_site() -> Iterator[TeamSite]:
    with TeamSite() as site:
        yield site


@pytest.fixture
def models() -> Iterator[FakeModelServer]:
    server = FakeModelServer(team_script(items=1, ask_code=True))
    server.start_in_thread()
    yield server
    server.stop_thread()


def _command(server: FakeModelServer, site: TeamSite, out: Path) -> list[str]:
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", server.base_url(role)]
    run = ["run", "--url", f"{site.url}/app/item/1", "--goal", item_goal(1), "--output", str(out), "--json"]
    return [sys.executable, "-m", "webagent", *run, *flags]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    return env | {"WEBAGENT_SECRET_PASSWORD": PASSWORD}


def test_on_a_terminal_the_question_is_asked_and_answered(
    models: FakeModelServer, team_site: TeamSite, tmp_path: Path
) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        _command(models, team_site, tmp_path / "run"), stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=_env(),
    )  # fmt: skip
    os.close(slave)
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + 120
    while b"6-digit code" not in seen and time.monotonic() < deadline and proc.poll() is None:
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            seen += os.read(proc.stderr.fileno(), 4096)
    assert b"webagent needs you" in seen and b"6-digit code" in seen, seen.decode()[-2000:]
    os.write(master, f"{OTP_CODE}\n".encode())
    out, err = proc.communicate(timeout=120)
    os.close(master)
    assert proc.returncode == 0, (seen + err).decode()[-2000:]
    result = json.loads(out.splitlines()[-1])
    assert result["success"] and result["stop_reason"] == "answered"


def test_without_a_terminal_the_run_needs_a_human(models: FakeModelServer, team_site: TeamSite, tmp_path: Path) -> None:
    proc = subprocess.run(
        _command(models, team_site, tmp_path / "run"), stdin=subprocess.DEVNULL, capture_output=True, timeout=120,
        env=_env(),
    )  # fmt: skip
    assert proc.returncode == 1
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["stop_reason"] == "needs_human"
    assert "needs a person to go on" in result["message"] and "6-digit code" in result["message"]
