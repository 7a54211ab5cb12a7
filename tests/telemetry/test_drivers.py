"""Every driver records the same way: a caller-driven RL episode (``WebEnv`` reset, step, close)
and a pilot's ``check`` export their spans to a real OTLP receiver as a run does -- a run span, its
step spans, the model calls under them -- and write their run directories (``webagent.record``),
the episode's HAR too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from webagent.testing.otlp import OTLPReceiver

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[2]


def test_an_rl_episode_and_a_pilot_check_are_traced_like_a_run(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WEBAGENT_", "OTEL_"))}
    with OTLPReceiver() as receiver:
        env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "rl-and-pilot"}
        done = subprocess.run(
            [sys.executable, "-m", "tests.telemetry.drivers", str(tmp_path)],
            capture_output=True,
            timeout=180,
            env=env,
            cwd=ROOT,
        )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert done.stdout.splitlines()[-1].split() == [b"ok", b"1.0", b"True", b"True"]  # (the logs before)
    runs = receiver.named("invoke_agent webagent")
    by_goal = {s.attributes["webagent.goal"]: s for s in runs}
    assert len(runs) == 2 and {s.service for s in receiver.spans} == {"rl-and-pilot"}
    episode = next(s for goal, s in by_goal.items() if "Blue Widget" in goal and not goal.startswith("Check:"))
    check = by_goal["Check: The page shows the Blue Widget at $12.50"]
    # The episode: three step spans (the caller's actions), the localizer's calls under them, the answer judged.
    steps = sorted(
        (s for s in receiver.named("webagent.step") if s.parent_span_id == episode.span_id), key=lambda s: s.start_ns
    )
    assert [s.attributes["webagent.step"] for s in steps] == [1, 2, 3]
    calls = [s for s in receiver.named("chat ") if s.parent_span_id in {s.span_id for s in steps}]
    assert sorted(c.attributes["webagent.role"] for c in calls) == ["localizer", "localizer", "validator"]
    assert episode.attributes["webagent.success"] is True and episode.attributes["webagent.steps"] == 3
    # The check: one step, the validator's call under it, its verdict on the run span.
    check_steps = [s for s in receiver.named("webagent.step") if s.parent_span_id == check.span_id]
    assert len(check_steps) == 1
    check_calls = [s for s in receiver.named("chat ") if s.parent_span_id == check_steps[0].span_id]
    assert [c.attributes["webagent.role"] for c in check_calls] == ["validator"]
    assert check.attributes["webagent.success"] is True and check.trace_id != episode.trace_id
    # The same recorder wrote their run directories.
    assert (tmp_path / "episode" / "result.json").is_file() and (
        tmp_path / "pilot" / "check-1" / "result.json"
    ).is_file()
