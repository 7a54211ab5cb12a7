"""An attack through the real CLI: a secret typed on an allowed page, sent off by the page through a
redirected CORS request (issue 23, rows 1 and 4), with ``--allow-domain`` and a scripted model.

With a secret the agent keeps the browser's DevTools port closed, so this is the guard without
the direct connection: Playwright's route, the page's own CDP session, the proxy net. The
forbidden server must receive nothing at all, and the run must go on (the page reports the
failure of its request, the policy answers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.attacksites import ALLOWED_HOST, FRAME_HOST, SECRET_BUTTON, SECRET_FIELD, AttackSites
from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

VALUE = "hunter2-Correct-Horse-77"
GOAL = "Type the password into the password field and press Send."

SCRIPT: dict[str, Any] = {
    "tasks": [
        {
            "id": "exfiltration",
            "match": "Type the password",
            "elements": {"password field": list(SECRET_FIELD), "send button": list(SECRET_BUTTON)},
            "policy": [
                {
                    "when": {"step": 1},
                    "action": {"action": "write_element", "element": "password field", "content": "{{PASSWORD}}"},
                },
                {"when": {"step": 2}, "action": {"action": "click_element", "element": "send button"}},
                {"when": {"step": 3}, "action": {"action": "answer", "content": "sent"}},
            ],
            "validator": {"accept": ["sent"]},
        }
    ]
}


@pytest.fixture
def recording() -> Iterator[FakeModelServer]:
    server = FakeModelServer(SCRIPT, keep_raw=True)
    server.start_in_thread()
    yield server
    server.stop_thread()


def test_a_secret_sent_off_through_a_redirect_never_reaches_the_forbidden_host(
    recording: FakeModelServer, tmp_path: Path
) -> None:
    with AttackSites() as sites:
        config = tmp_path / "webagent.toml"
        config.write_text("[browser]\nargs = " + json.dumps(sites.browser_args()) + "\n")
        flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
        for role in ("policy", "localizer", "validator"):
            flags += [f"--{role}-base-url", recording.base_url(role)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
        env["WEBAGENT_SECRET_PASSWORD"] = VALUE
        url = sites.url("fetch-redirect-post", secret=True)
        command = [sys.executable, "-m", "webagent", "run", "--url", url, "--goal", GOAL, "--config", str(config)]
        domains = ["--allow-domain", ALLOWED_HOST, "--allow-domain", FRAME_HOST]
        proc = subprocess.run(
            [*command, *domains, "--output", str(tmp_path / "run"), "--json", *flags],
            capture_output=True,
            timeout=180,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr.decode()
        assert json.loads(proc.stdout)["success"] is True
        # The page ran its attack with the value typed (it reported how its request ended) ...
        results = sites.results("fetch-redirect-post")
        assert len(results) == 1 and results[0].startswith("error"), results
        # ... and the forbidden endpoints heard nothing, the value least of all.
        assert sites.hits == []
    for path in (tmp_path / "run").rglob("*"):
        if path.is_file():
            assert VALUE.encode() not in path.read_bytes(), path
