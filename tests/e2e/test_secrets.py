"""A secret through the real CLI: typed into the page, never written, logged, printed or sent to a model.

The sign-in page is a GET form, so after submitting the secret also sits in the page URL -- which
the policy prompt, the steps, the outcome strings and the result all carry unless redacted. The
test scans every byte the run wrote, printed (with debug logging) and every byte of every request
the offline model server received.
"""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, unquote

import pytest

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

pytestmark = pytest.mark.e2e

VALUE = "s3cr3t-Pa55!#x"
FORMS = {VALUE, quote(VALUE, safe=""), quote_plus(VALUE), quote(VALUE)}
GOAL = "Sign in to the test site as ada with the access code, then confirm you are signed in."

SCRIPT: dict[str, Any] = {
    "tasks": [
        {
            "id": "secret-login",
            "match": "Sign in to the test site",
            "elements": {"user field": [560, 164], "access code field": [560, 244]},
            "policy": [
                {"when": {"url": "/safety/login?user="}, "action": {"action": "answer", "content": "signed in"}},
                {
                    "when": {"step": 1},
                    "action": {"action": "write_element", "element": "user field", "content": "ada"},
                },
                {
                    "when": {"step": 2},
                    "note": "code typed as {{CODE}}",
                    "action": {
                        "action": "write_element",
                        "element": "access code field",
                        "content": "{{CODE}}",
                        "press_enter": True,
                    },
                },
                {"when": {"final": True}, "action": {"action": "answer", "content": "not signed in"}},
            ],
            "validator": {"accept": ["signed in"], "url": "/safety/login?user=ada"},
        }
    ]
}


@pytest.fixture
def recording() -> Iterator[FakeModelServer]:
    server = FakeModelServer(SCRIPT, keep_raw=True)
    server.start_in_thread()
    yield server
    server.stop_thread()


def _occurrences(data: bytes) -> int:
    return sum(data.count(form.encode()) for form in FORMS)


def test_secret_is_typed_but_never_leaves_the_agent(
    recording: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", recording.base_url(role)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    env["WEBAGENT_SECRET_CODE"] = VALUE
    site.logins.clear()
    command = [sys.executable, "-m", "webagent", "run", "--url", site.url + "/safety/login", "--goal", GOAL]
    proc = subprocess.run(
        [*command, "--output", str(out), "--json", "-vv", *flags],
        capture_output=True,
        timeout=120,
        env=env,
    )
    result = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr.decode()
    assert result["success"] is True

    # The value was typed into the page and submitted...
    assert site.logins == [{"user": "ada", "code": VALUE}]
    # ... the policy was told the name, and its placeholder is what the records keep.
    policy_texts = [r.text for r in recording.requests if r.role == "policy"]
    assert all("Secrets you can type" in t and "CODE" in t for t in policy_texts)
    turns = [r.turn for r in recording.requests if r.role == "policy"]
    assert any("code={{CODE}}" in t for t in turns)  # the page URL after the GET form, redacted
    steps = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert steps[1]["action"]["content"] == "{{CODE}}"
    assert "code={{CODE}}" in result["final_url"]

    # Not one byte anywhere holds the value, in any encoding.
    written = sorted(p for p in out.rglob("*") if p.is_file())
    assert {p.name for p in written} >= {"trajectory.jsonl", "result.json", "report.html", "step_001.jpg"}
    for path in written:
        assert _occurrences(path.read_bytes()) == 0, path
    assert _occurrences(proc.stdout) == 0 and _occurrences(proc.stderr) == 0
    assert len(recording.raw) >= 5
    for raw in recording.raw:
        assert _occurrences(raw) == 0
    assert b"{{CODE}}" in b"".join(recording.raw)  # the scan looks at the real request bodies


#: Every piece of the value six characters long: what a cut through it would leave.
PARTS = {VALUE[i : i + 6] for i in range(len(VALUE) - 5)}


def _parts(data: bytes) -> list[str]:
    """The parts of the value in ``data``: as they are, percent-encoded or as HTML character references."""
    text = data.decode("utf-8", "replace")
    decoded = (text, unquote(text), html.unescape(html.unescape(text)))
    return sorted(part for part in PARTS if any(part in t for t in decoded))


def test_a_secret_sent_to_a_blocked_host_leaves_no_part_of_itself(
    recording: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    # The signed-in page shows the code as HTML character references in its title, and navigates
    # to a blocked host with the code in its URL where the guard's report of the refusal is cut.
    out = tmp_path / "run"
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", recording.base_url(role)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    env["WEBAGENT_SECRET_CODE"] = VALUE
    site.safety_hits.clear()
    start = site.url + "/safety/login?then=exfil"
    command = [sys.executable, "-m", "webagent", "run", "--url", start, "--goal", GOAL, "--allow-domain", "127.0.0.1"]
    proc = subprocess.run(
        [*command, "--output", str(out), "--json", "-vv", *flags], capture_output=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert not [hit for hit in site.safety_hits if "via=exfil" in hit[1]]  # the guard held

    steps = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    events = [event for step in steps for event in step["events"]]
    assert any(
        e.startswith(f"Blocked a navigation to http://localhost:{site.port}/safety/target?via=exfil") for e in events
    )
    turns = [r.turn for r in recording.requests if r.role == "policy"]
    assert any("via=exfil" in turn for turn in turns)  # the next policy prompt was told
    assert any("{{CODE}}" in step["title"] for step in steps[2:])  # the title, redacted
    assert b"navigation_blocked" in proc.stderr
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        assert _parts(path.read_bytes()) == [], path
    assert _parts(proc.stdout) == [] and _parts(proc.stderr) == []
    for raw in recording.raw:
        assert _parts(raw) == []


def _steered_script(other: str) -> dict[str, Any]:
    """The sign-in page of another host (``other``: the same server as ``localhost``), where the policy
    writes the code."""
    policy = SCRIPT["tasks"][0]["policy"]
    return {
        "tasks": [
            {
                **SCRIPT["tasks"][0],
                "policy": [
                    policy[0],
                    {"when": {"step": 1}, "action": {"action": "goto", "url": f"{other}/safety/login"}},
                    {**policy[1], "when": {"step": 2}},
                    {**policy[2], "when": {"step": 3}},
                    {"when": {}, "action": {"action": "answer", "content": "not signed in"}},
                ],
                "validator": {"accept": ["signed in"]},
            }
        ]
    }


@pytest.mark.parametrize("allowed", [False, True])
def test_a_secret_is_typed_only_on_the_hosts_allowed_for_it(site: SiteServer, tmp_path: Path, allowed: bool) -> None:
    # The start is the operator's (127.0.0.1:PORT); the page the policy goes to is another host
    # (localhost:PORT), where only --secret-host lets the code be typed.
    other = f"http://localhost:{site.port}"
    server = FakeModelServer(_steered_script(other), keep_raw=True)
    server.start_in_thread()
    out = tmp_path / "run"
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", server.base_url(role)]
    if allowed:
        flags += ["--secret-host", f"CODE=localhost:{site.port}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    env["WEBAGENT_SECRET_CODE"] = VALUE
    site.logins.clear()
    site.safety_hits.clear()
    command = [sys.executable, "-m", "webagent", "run", "--url", site.url + "/safety/login", "--goal", GOAL]
    try:
        proc = subprocess.run(
            [*command, "--output", str(out), "--json", "-vv", *flags], capture_output=True, timeout=120, env=env
        )
    finally:
        server.stop_thread()
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    result = json.loads(proc.stdout)
    steps = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    if allowed:
        assert site.logins == [{"user": "ada", "code": VALUE}] and result["answer"] == "signed in"
        return
    # The other host's page never received the code: no sign-in, no request holding it.
    assert site.logins == [] and result["answer"] == "not signed in"
    assert not [hit for hit in site.safety_hits if _occurrences(hit[1].encode())]
    refusal = f"the secret CODE was not typed: it may not be typed on localhost:{site.port}"
    assert steps[2]["error"].startswith(refusal) and f"(allowed: 127.0.0.1:{site.port})" in steps[2]["error"]
    assert any(refusal in r.turn for r in server.requests if r.role == "policy")  # the policy was told
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        assert _occurrences(path.read_bytes()) == 0, path
    assert _occurrences(proc.stdout) == 0 and _occurrences(proc.stderr) == 0
    assert all(_occurrences(raw) == 0 for raw in server.raw)
