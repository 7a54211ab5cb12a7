"""The shell tests' parts: a private runtime directory per test, the shop, the offline model server
on a thread of its own (the commands run as subprocesses, as a shell runs them), and ``Shell``:
``webagent session ...`` run the way a coding agent runs it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer, sites_dir
from webagent.testing.threaded import LoopThread

from .site import PASSWORD, shop

REPO = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_S = 180


def shop_script() -> dict[str, Any]:
    """The offline model's answers for the shop: a goal answered at once, a check, an extraction."""
    return {
        "tasks": [
            {
                "id": "shop-count",
                "match": "How many item rows",
                "policy": [
                    {
                        "when": {"step": 1},
                        "thought": "The table lists two items.",
                        "action": {"action": "answer", "content": "2"},
                    }
                ],
                "validator": {"accept": ["2"], "feedback": "Count the rows of the items table."},
            },
            {
                "id": "profile-visit",
                "match": "Visit the page",
                "policy": [
                    {
                        "when": {"step": 1},
                        "thought": "The page is open.",
                        "action": {"action": "answer", "content": "visited"},
                    }
                ],
                "validator": {"accept": ["visited"], "feedback": "Open the page."},
            },
        ],
        "checks": [{"match": "signed in", "url": "/items", "title": "Items"}],
        "extracts": [
            {
                "match": "table",
                "url": "/items",
                "value": {"items": [{"name": "Apple", "qty": 3}, {"name": "Pear", "qty": 1}]},
            }
        ],
    }


@dataclass
class Shell:
    """``webagent session`` commands in subprocesses, all on one private runtime directory."""

    directory: Path
    model_url: str
    env: dict[str, str] = field(default_factory=dict)

    def flags(self) -> list[str]:
        flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
        for role in ("policy", "localizer", "validator"):
            flags += [f"--{role}-base-url", f"{self.model_url}/{role}/v1"]
        return [*flags, "--private-network", "allow"]

    def __call__(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "webagent", *args],
            env={**self.env, **(extra_env or {})},
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )

    def json(self, *args: str) -> tuple[int, dict[str, Any]]:
        done = self("session", "--json", *args)
        return done.returncode, json.loads(done.stdout)

    def daemon_pid(self) -> int | None:
        """The background process's pid while one runs (it writes it into the lock it holds)."""
        try:
            pid = int((self.directory / "daemon.lock").read_text().strip() or 0)
        except (OSError, ValueError):
            return None
        return (
            pid
            if pid
            and Path(f"/proc/{pid}").exists()
            and b"webagent.shell.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes()
            else None
        )


@pytest.fixture(scope="module")
def model_url() -> Iterator[str]:
    thread = LoopThread("shell-model")
    server = FakeModelServer(shop_script())
    thread.start(server.__aenter__)
    try:
        yield server.url
    finally:
        thread.stop(lambda: server.__aexit__(None, None, None))


@pytest.fixture(scope="module")
def shop_url() -> Iterator[str]:
    with shop() as url:
        yield url


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SiteServer]:
    """The hands pages and the shell tests' own pages (``pages/``, under ``/shell/``) on one local site,
    each reporting what it saw to ``SiteServer.hand_events``."""
    root = tmp_path_factory.mktemp("site")
    shutil.copytree(sites_dir() / "hands", root / "hands")
    shutil.copytree(Path(__file__).with_name("pages"), root / "shell")
    with SiteServer(root) as served:
        yield served


def seen(site: SiteServer, page: str) -> list[dict[str, str]]:
    """What ``page`` reported, in order."""
    return [e for e in site.hand_events if e.get("page") == page]


@pytest.fixture
def shell(model_url: str) -> Iterator[Shell]:
    directory = Path(tempfile.mkdtemp(prefix="wa-shell-", dir="/tmp"))  # a socket path is short
    os.chmod(directory, 0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["WEBAGENT_SHELL_DIR"] = str(directory)
    env["WEBAGENT_SECRET_PASSWORD"] = PASSWORD
    s = Shell(directory, model_url, env)
    try:
        yield s
    finally:
        s("session", "close", "--all")
        pid = s.daemon_pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(directory, ignore_errors=True)
