"""The new hands through ``webagent run`` (a subprocess): a drag, a panel's wheel, a tab switch in
each contract form, and a form filled four actions a turn, shown step by step on the terminal."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.hands import HAND_TASKS, SIGNUP, SIGNUP_PLAN, plan_script
from webagent.testing.offline import FAMILY_MODELS, PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from .test_cli import webagent
from .test_hands import events_of, merged

pytestmark = pytest.mark.e2e

TASKS = {name: HAND_TASKS[name] for name in ("board-card", "log-panel", "coupon-tab")}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModelServer]:
    script = merged(TASKS)
    signup = plan_script(
        SIGNUP.goal, SIGNUP_PLAN, SIGNUP.elements, marker=SIGNUP.marker, answer=SIGNUP.answer, per_turn=4
    )
    script["elements"].update(signup["elements"])
    script["tasks"].append({**signup["tasks"][0], "id": "signup"})
    server = FakeModelServer(script)
    server.start_in_thread()
    yield server
    server.stop_thread()


def flags(server: FakeModelServer, family: str | None, grounding: str, output: str) -> list[str]:
    model = FAMILY_MODELS[family] if family else PROFILE_MODELS["holo1.5"]
    out = ["--model", model, "--api-key", "offline", "--grounding", grounding, "--max-steps", "10"]
    out += ["--localizer-model", PROFILE_MODELS["holo1.5"], "--localizer-base-url", server.base_url("localizer")]
    if family:  # H's families: one model at one server, the judge in the policy's conversation
        out += ["--policy-family", family, "--policy-output", output, "--policy-base-url", f"{server.url}/v1"]
        out += ["--validator-base-url", f"{server.url}/v1"]
    else:
        out += ["--policy-base-url", server.base_url("policy"), "--validator-base-url", server.base_url("validator")]
    return out


@pytest.mark.parametrize(
    ("name", "family", "grounding", "output"),
    [
        ("board-card", None, "localizer", "json"),
        ("log-panel", "holo3", "policy", "json"),
        ("coupon-tab", "holo3.1", "localizer", "tools"),
    ],
)
def test_a_hand_through_the_cli(
    fake: FakeModelServer, site: SiteServer, tmp_path: Path, name: str, family: str | None, grounding: str, output: str
) -> None:
    task = TASKS[name]
    site.hand_events.clear()
    out = tmp_path / "run"
    args = ["run", "--url", task.url(site.url), "--goal", task.goal, "--output", str(out), "--json"]
    proc = webagent(*args, *flags(fake, family, grounding, output))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["success"] is True and result["answer"] == task.answer
    assert events_of(site, task), site.hand_events
    assert f"] {task.hand}" in proc.stderr  # the step line shows the hand
    steps = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert any(s["action"]["action"] == task.hand for s in steps)
    report = (out / "report.html").read_text()
    assert task.hand in report
    if name == "board-card":  # a drag's two points, on the terminal and in the record
        assert 'drag_element "Write report card" to "Done column" at (250, 181) to (950, 400)' in proc.stderr
        assert steps[0]["target_point"]["viewport"] == pytest.approx([950, 400], abs=1)
        assert "Released at" in report


def test_four_actions_a_turn_through_the_cli(fake: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    site.hand_events.clear()
    out = tmp_path / "run"
    args = ["run", "--url", SIGNUP.url(site.url), "--goal", SIGNUP.goal, "--output", str(out), "--json"]
    proc = webagent(*args, "--max-actions-per-turn", "4", *flags(fake, None, "localizer", "json"))
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    assert result["success"] is True and result["steps"] == 3 and result["usage"]["policy"]["calls"] == 3
    assert any(e["page"] == "signup" and e["city"] == "London" for e in site.hand_events)
    # Each action of a turn on a line of its own.
    assert '[1/10] write_element "First name field" content="Ada" at (560, 140) -> ok' in proc.stderr
    assert '    then write_element "Last name field" content="Lovelace" at (560, 200) -> ok' in proc.stderr
    steps = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert [len(s["actions"]) for s in steps] == [4, 3, 0] and steps[1]["actions"][2]["action"][
        "action"
    ] == "click_element"
    assert "3 actions: write_element" in (out / "report.html").read_text()
