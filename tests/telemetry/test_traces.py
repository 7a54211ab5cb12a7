"""Traces teams can see: the CLI's runs exported over OTLP/HTTP to a real receiver (OpenTelemetry's
own protobuf definitions decode them) when the standard ``OTEL_*`` environment says so -- a run span,
its steps, each model call with model, tokens, latency and cost, each browser action -- with no
secret, password or signed-in cookie in any byte sent; and nothing of OpenTelemetry loaded when off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.otlp import OTLPReceiver
from webagent.testing.server import FakeModelServer
from webagent.testing.teamscripts import SIGN_IN_GOAL, team_script
from webagent.testing.teamsite import OTP_CODE, PASSWORD, TeamSite

pytestmark = pytest.mark.e2e

WHOAMI = "Open the whoami page of the team site and say whose session it is"


@pytest.fixture(scope="module")
def team_site() -> Iterator[TeamSite]:
    with TeamSite() as site:
        yield site


@pytest.fixture
def models() -> Iterator[FakeModelServer]:
    script = team_script(items=1)
    script["tasks"].append(
        {
            "id": "whoami",
            "match": "Open the whoami page",
            "policy": [{"when": {"url": "/app/whoami"}, "action": {"action": "answer", "content": "ada's session"}}],
            "validator": {"accept": ["session"]},
        }
    )
    server = FakeModelServer(script)
    server.start_in_thread()
    yield server
    server.stop_thread()


def _webagent(server: FakeModelServer, receiver: OTLPReceiver, *args: str) -> subprocess.CompletedProcess[bytes]:
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", server.base_url(role), f"--{role}-timeout-s", "30"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WEBAGENT_", "OTEL_"))}
    env |= {
        "WEBAGENT_SECRET_PASSWORD": PASSWORD,
        "WEBAGENT_SECRET_OTP": OTP_CODE,
        "WEBAGENT_POLICY_PRICE_PROMPT_PER_M": "2.5",
        "WEBAGENT_POLICY_PRICE_COMPLETION_PER_M": "10",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "staging-smoke",
    }
    return subprocess.run([sys.executable, "-m", "webagent", *args, *flags], capture_output=True, timeout=180, env=env)


def test_runs_are_traced_to_an_otlp_receiver_without_a_secret(
    models: FakeModelServer, team_site: TeamSite, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    with OTLPReceiver() as receiver:
        saved = _webagent(
            models, receiver, "auth", "save", f"{team_site.url}/app/", "--goal", SIGN_IN_GOAL, "--output", str(state),
            "--run-dir", str(tmp_path / "auth"),
        )  # fmt: skip
        assert saved.returncode == 0, saved.stderr.decode()[-2000:]
        run = _webagent(
            models, receiver, "run", "--url", f"{team_site.url}/app/whoami", "--goal", WHOAMI,
            "--storage-state", str(state), "--output", str(tmp_path / "run"),
        )  # fmt: skip
        assert run.returncode == 0, run.stderr.decode()[-2000:]
    runs = receiver.named("invoke_agent webagent")
    assert len(runs) == 2 and {s.service for s in receiver.spans} == {"staging-smoke"}
    sign_in = next(s for s in runs if s.attributes["webagent.goal"] == SIGN_IN_GOAL)
    assert sign_in.attributes["webagent.success"] is True and sign_in.attributes["webagent.stop_reason"] == "answered"
    assert sign_in.attributes["gen_ai.operation.name"] == "invoke_agent"
    steps = [s for s in receiver.named("webagent.step") if s.parent_span_id == sign_in.span_id]
    assert [s.attributes["webagent.step"] for s in sorted(steps, key=lambda s: s.start_ns)] == [1, 2, 3, 4]
    step_ids = {s.span_id for s in steps}
    calls = [s for s in receiver.named("chat ") if s.parent_span_id in step_ids]
    assert {c.attributes["webagent.role"] for c in calls} == {"policy", "localizer", "validator"}
    policy = next(c for c in calls if c.attributes["webagent.role"] == "policy")
    assert policy.name == f"chat {PROFILE_MODELS['holo1.5']}" and policy.attributes["gen_ai.request.model"]
    assert policy.attributes["gen_ai.usage.input_tokens"] > 0 and policy.attributes["gen_ai.usage.output_tokens"] > 0
    assert policy.attributes["webagent.cost_usd"] > 0 and policy.end_ns >= policy.start_ns
    tools = [s for s in receiver.named("execute_tool ") if s.parent_span_id in step_ids]
    assert [t.attributes["gen_ai.tool.name"] for t in tools] == ["write_element"] * 3
    assert all(s.trace_id == sign_in.trace_id for s in steps + calls + tools)
    # What the runs knew and must never send: the password, the code, the session's cookie values.
    values = [PASSWORD, OTP_CODE] + [c["value"] for c in json.loads(state.read_text())["cookies"]]
    sent = b"".join(receiver.bodies)
    for value in values:
        assert value.encode() not in sent, value[:3]
    whoami = next(s for s in runs if s.attributes["webagent.goal"] == WHOAMI)
    whoami_step = next(s for s in receiver.named("webagent.step") if s.parent_span_id == whoami.span_id)
    assert "{{STORAGE_STATE}}" in whoami_step.attributes["url.full"]  # the session id the URL held


def test_off_by_default_and_nothing_of_opentelemetry_is_loaded() -> None:
    code = (
        "import sys, webagent, webagent.stream, webagent.telemetry as t; "
        "print(t.enabled(), any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "False"]
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "False"]
