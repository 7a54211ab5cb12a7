"""What a model writes reaches the operator's terminal as text, never as control sequences: the real
CLI, the offline model server scripted to say them, the question asked on a terminal (a pty)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

pytestmark = pytest.mark.e2e

#: Set the window title, clear the screen, then a C1 CSI (U+009B) clearing it again, and a
#: right-to-left override that would make the rest of the line read backwards.
ATTACK = "\x1b]0;pwned\x07\x1b[2J\u009b2J\u202eKO"
GOAL = "Ask the person for the access code and report it"
#: What must never reach a terminal raw (as UTF-8): ESC, BEL, U+009B, U+202E.
RAW = (b"\x1b", b"\x07", "\u009b".encode(), "\u202e".encode())


def _script() -> dict[str, Any]:
    return {
        "viewport": {"width": 1280, "height": 800},
        "tasks": [
            {
                "id": "terminal",
                "match": "access code",
                "policy": [
                    {
                        "when": {"last_action": "ask_user"},
                        "action": {"action": "answer", "content": f"the code is 42 {ATTACK}"},
                    },
                    {
                        "when": {"step": 1},
                        "note": f"note {ATTACK}",
                        "action": {"action": "ask_user", "question": f"What is the code? {ATTACK}"},
                    },
                ],
                "validator": {"accept": ["the code is 42"], "feedback": f"no {ATTACK}"},
            }
        ],
    }


def test_a_models_control_characters_are_shown_not_acted_on(site: SiteServer, tmp_path: Path) -> None:
    server = FakeModelServer(_script())
    server.start_in_thread()
    try:
        flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
        for role in ("policy", "localizer", "validator"):
            flags += [f"--{role}-base-url", server.base_url(role)]
        command = [sys.executable, "-m", "webagent", "run", "--url", f"{site.url}/catalog/", "--goal", GOAL]
        command += ["--output", str(tmp_path / "run"), "--json", *flags]
        env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
        master, slave = pty.openpty()  # stdin a terminal: the question is asked there
        proc = subprocess.Popen(command, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        os.close(slave)
        assert proc.stderr is not None
        seen = b""
        deadline = time.monotonic() + 120
        while b"\n> " not in seen and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if ready:
                seen += os.read(proc.stderr.fileno(), 4096)
        assert b"webagent needs you" in seen, seen.decode(errors="replace")[-2000:]
        os.write(master, b"42\n")
        out, err = proc.communicate(timeout=120)
        os.close(master)
    finally:
        server.stop_thread()
    stderr = seen + err
    assert proc.returncode == 0, stderr.decode(errors="replace")[-3000:]
    for raw in RAW:
        assert raw not in stderr and raw not in out, (raw, stderr.decode(errors="replace")[-3000:])
    shown = r"\x1b]0;pwned\x07\x1b[2J\x9b2J\u202eKO"  # every character kept, as its escape
    text = stderr.decode()
    assert f"What is the code? {shown}" in text  # the hand-off's question
    assert f"answer: the code is 42 {shown}" in text  # the result line (PASS answer: ...)
    result = json.loads(out)  # --json: the same characters as JSON escapes, so the value is intact
    assert result["success"] is True and result["answer"] == f"the code is 42 {ATTACK}"
    assert "\\u001b]0;pwned\\u0007" in out.decode() and "\\u009b2J\\u202eKO" in out.decode()
