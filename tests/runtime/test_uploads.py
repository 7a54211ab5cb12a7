"""``upload_file`` and frames through the whole agent: the policy names an allowed file, the localizer
points at an upload button, the page receives the file; a cross-origin frame's select is chosen."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from webagent import Agent
from webagent.testing.teampages import FRAME_COLUMNS, FRAME_ROWS
from webagent.testing.teamsite import TeamSite

from ..conftest import ServerFactory, make_config
from .conftest import act, answer, script

pytestmark = pytest.mark.e2e

GOAL = "Upload the quarterly report and choose beta in the partner frame"


async def test_the_agent_uploads_an_allowed_file_and_acts_in_a_cross_origin_frame(
    model_server: ServerFactory, team_site: TeamSite, tmp_path: Path
) -> None:
    files = tmp_path / "uploads"
    files.mkdir()
    (files / "q3-report.pdf").write_bytes(b"%PDF-1.4 q3 " * 100)
    (tmp_path / "private.txt").write_text("not for the page")
    rules = [
        act({"action": "upload_file", "element": "upload button", "file": "../private.txt"}, step=1),
        act({"action": "upload_file", "element": "upload button", "file": "q3-report.pdf"}, step=2),
        act({"action": "goto", "url": f"{team_site.url}/frames/"}, step=3),
        act({"action": "select_option", "element": "partner select", "option": "beta"}, step=4),
        answer("uploaded and chosen"),
    ]
    elements = {
        "upload button": [400, 200],
        "partner select": [FRAME_COLUMNS["cross"], FRAME_ROWS["select"]],
    }
    before = len(team_site.uploads)
    async with model_server(script(GOAL, rules, elements=elements)) as server:
        config = make_config(server)
        config.browser.upload_dir = files
        async with Agent(config) as agent:
            stream = agent.stream(f"{team_site.url}/upload/button", GOAL)
            steps = [step async for step in stream]
    assert stream.result is not None and stream.result.success
    assert "not a path" in (steps[0].error or "")  # the policy named a path: refused, told, nothing sent
    assert steps[1].outcome is not None and steps[1].outcome.startswith("ok, gave the file 'q3-report.pdf'")
    sent = team_site.uploads[before:]
    assert [u["name"] for u in sent] == ["q3-report.pdf"]
    assert sent[0]["sha256"] == hashlib.sha256(b"%PDF-1.4 q3 " * 100).hexdigest()
    assert steps[3].outcome == "ok, selected 'beta'"
    assert any(e["who"] == "cross" and e["kind"] == "select" and e["value"] == "beta" for e in team_site.events)
    assert (
        steps[0].context is not None
        and steps[0].context.policy is not None
        and steps[0].context.policy.uploads == ["q3-report.pdf"]
    )
