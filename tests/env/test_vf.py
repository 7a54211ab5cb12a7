"""verifiers: ``vf-eval webagent`` (verifiers' own evaluation entry point, from the verifiers venv:
scripts/setup-verifiers.sh) against the offline model server, a MiniWoB++ task rewarded by its page
and a task the environment cannot start, which verifiers records as an errored rollout, not a reward."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer

from .helpers import plan_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
VIEWPORT = (500, 320)
SEED = 7
BUTTON = """() => { const r = document.querySelector('#subbtn').getBoundingClientRect();
  return [{x: r.x + r.width / 2, y: r.y + r.height / 2}]; }"""


@pytest.fixture(scope="module")
def vf_venv() -> Path:
    """The verifiers venv (made on first use: a few minutes; then reused while its requirements hold)."""
    made = subprocess.run(
        [str(ROOT / "scripts" / "setup-verifiers.sh")], check=True, timeout=1200, capture_output=True, text=True
    )
    return Path(made.stdout.strip().splitlines()[-1])


def script(button: tuple[float, float]) -> dict[str, Any]:
    return {
        "viewport": {"width": VIEWPORT[0], "height": VIEWPORT[1]},
        "tasks": [
            {
                "id": "click-test",
                "match": "Click the button.",
                "elements": {"the button": list(button)},
                "policy": [
                    {
                        "when": {"step": 1},
                        "note": "",
                        "thought": "One button to click.",
                        "action": {"action": "click_element", "element": "the button"},
                    }
                ],
            }
        ],
    }


async def test_vf_eval_runs_the_environment_and_scores_it_by_its_reward(
    vf_venv: Path, browser: Browser, tmp_path: Path
) -> None:
    (center,) = await plan_for(browser, "miniwob/click-test", SEED, VIEWPORT, BUTTON)
    async with FakeModelServer(script((center["x"], center["y"]))) as server:
        model = PROFILE_MODELS["holo1.5"]
        config = {
            "localizer.base_url": f"{server.url}/localizer/v1",
            "localizer.model": model,
            "localizer.api_key": "offline",
            "localizer.profile": "holo1.5",
            "browser.viewport": {"width": VIEWPORT[0], "height": VIEWPORT[1]},
        }
        # The third: a task's option the environment cannot honour is refused, never dropped.
        traced = {"id": "traced", "task": "miniwob/click-test", "seed": SEED, "trace": "always"}
        tasks = [{"task": "miniwob/click-test", "seed": SEED}, {"task": "miniwob/no-such-task"}, traced]
        args = {"tasks": tasks, "config": config, "max_turns": 5}
        out = tmp_path / "vf"
        done = await asyncio_run(
            [
                str(vf_venv / "bin" / "vf-eval"), "webagent", "-a", json.dumps(args),
                "-m", model, "-b", f"{server.url}/policy/v1", "-k", "OFFLINE_KEY",
                "-n", "3", "-r", "1", "-c", "2", "-s", "-o", str(out), "-d", "--disable-env-server",
            ]
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert server.request_counts["localizer"] == 1 and server.request_counts["policy"] == 1
    (results,) = list(out.rglob("results.jsonl"))
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    specs = [json.loads(r["info"]["webagent_task"]) for r in rows]
    by_task = {spec.get("id", spec["task"]): r for spec, r in zip(specs, rows, strict=True)}
    solved, broken = by_task["miniwob/click-test"], by_task["miniwob/no-such-task"]
    assert solved["reward"] == 1.0 and not solved.get("error"), solved
    # Multimodal turns: the first prompt is the observation, its screenshot an image part.
    parts = solved["prompt"][-1]["content"]
    assert any(p.get("type") == "image_url" for p in parts) and "Click the button." in json.dumps(parts)
    # The task the environment could not start: an errored rollout (verifiers' InfraError), no reward.
    assert broken.get("error") and "InfraError" in json.dumps(broken["error"]), broken
    assert broken["reward"] == 0.0 and broken["metrics"]["webagent_failed"] == 1.0
    refused = by_task["traced"]
    assert "trace cannot be honoured" in json.dumps(refused["error"]) and refused["reward"] == 0.0, refused


async def asyncio_run(command: list[str]) -> subprocess.CompletedProcess[str]:
    import asyncio

    # The venv holds webagent's dependencies, not webagent: this checkout comes first on the path.
    env = {**os.environ, "OFFLINE_KEY": "offline", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT)}
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=900, env=env, cwd=str(ROOT)
    )
