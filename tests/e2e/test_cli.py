"""The real CLI in a subprocess: exit codes, --json, one-line errors, the run directory."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.offline import FAMILY_MODELS, PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..conftest import load_task_script

pytestmark = pytest.mark.e2e


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


DEAD = f"http://127.0.0.1:{_closed_port()}/"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModelServer]:
    server = FakeModelServer(load_task_script("catalog-price"))
    server.start_in_thread()
    yield server
    server.stop_thread()


def webagent(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "webagent", *args], capture_output=True, text=True, timeout=timeout, env=full_env
    )


def role_flags(server: FakeModelServer, profile: str = "holo1.5") -> list[str]:
    flags = ["--localizer-profile", profile, "--model", PROFILE_MODELS[profile], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", server.base_url(role)]
    return flags


def test_run_success_json_and_run_directory(
    fake: FakeModelServer, site: SiteServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    task = local_tasks["catalog-price"]
    out = tmp_path / "run"
    proc = webagent(
        "run", "--url", task["url"], "--goal", task["goal"], "--output", str(out), "--json", *role_flags(fake)
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["success"] is True and result["answer"] == "$12.50" and result["stop_reason"] == "answered"
    assert set(result["usage"]) == {"policy", "localizer", "validator"}
    assert json.loads((out / "result.json").read_text()) == result
    assert "[1/" in proc.stderr and "PASS" in proc.stderr  # the live step display
    # Before the first step is done, what it is doing (seconds of silence otherwise).
    lines = proc.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("[1/"))
    assert lines[:first] == [
        f"webagent {task['url']}",
        f"goal: {task['goal']} (localizer holo1.5)",
        "launching the browser...",
        f"opening {task['url']}...",
        f"step 1: taking a screenshot and asking the policy model ({PROFILE_MODELS['holo1.5']} at "
        f"{fake.base_url('policy')})...",
    ]
    assert len((out / "trajectory.jsonl").read_text().splitlines()) == 3


def test_run_with_a_holo3_1_policy_as_the_readme_says(
    fake: FakeModelServer, site: SiteServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    """The README's command for a Holo3.1 server: one base URL and model for every role, the
    policy's family and the validator's; the policy grounds its clicks (no localizer is asked)."""
    task = local_tasks["catalog-price"]
    model = FAMILY_MODELS["holo3.1"]
    fake.reset()
    proc = webagent(
        "run", "--url", task["url"], "--goal", task["goal"], "--json", "--output", str(tmp_path / "run"),
        "--base-url", f"{fake.url}/v1", "--model", model, "--api-key", "offline",
        "--policy-family", "holo3.1", "--validator-family", "holo3.1",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["success"] is True and result["grounding"] == "policy"
    assert result["usage"]["localizer"]["calls"] == 0 and result["usage"]["policy"]["calls"] == 3
    assert "policy grounds its clicks" in proc.stderr
    policy = [r for r in fake.requests if r.role == "policy"]
    assert policy and all(r.extra["chat_template_kwargs"] == {"enable_thinking": True} for r in policy)
    # --policy-output tools: the same run in native tool calls.
    fake.reset()
    proc = webagent(
        "run", "--url", task["url"], "--goal", task["goal"], "--json",
        "--base-url", f"{fake.url}/v1", "--model", model, "--api-key", "offline",
        "--policy-family", "holo3.1", "--policy-output", "tools",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert all("tools" in r.extra for r in fake.requests if r.role == "policy")


def test_run_not_accomplished_exits_1(fake: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    # No scripted task matches this goal: the policy answers "NO SCRIPTED ACTION" and the validator rejects it.
    proc = webagent(
        "run",
        "--url",
        site.url + "/catalog/",
        "--goal",
        "Find the colour of the sky",
        "--max-steps",
        "2",
        "--max-attempts",
        "1",
        "--output",
        str(tmp_path / "r"),
        "--json",
        *role_flags(fake),
    )
    result = json.loads(proc.stdout)
    assert proc.returncode == 1, result
    assert result["success"] is False and result["attempts"] == 1 and result["answer"] == "NO SCRIPTED ACTION"


def test_max_steps_is_the_number_of_steps_everywhere(
    fake: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    task = local_tasks["catalog-price"]  # three steps to its answer: two are not enough
    out = tmp_path / "run"
    args = ["--url", task["url"], "--goal", task["goal"], "--max-steps", "2", "--output", str(out), "--json"]
    proc = webagent("run", *args, *role_flags(fake))
    result = json.loads(proc.stdout)
    assert proc.returncode == 1 and result["stop_reason"] == "max_steps", proc.stderr
    assert result["steps"] == 2 and result["message"].startswith("stopped after 2 steps;")
    assert len((out / "trajectory.jsonl").read_text().splitlines()) == 2
    lines = proc.stderr.splitlines()
    assert [line.split("]")[0] + "]" for line in lines if line.startswith("[")] == ["[1/2]", "[2/2 final]"]
    assert "(2 steps, " in lines[-2] and "stopped after 2 steps" in lines[-2], lines


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "", "--goal", "x"], "no URL given"),
        (["--url", "not a url", "--goal", "x"], "invalid URL"),
        (["--url", "ftp://example.com", "--goal", "x"], "scheme must be http"),
        (["--url", DEAD, "--goal", "x"], f"cannot open {DEAD}: net::ERR_CONNECTION_REFUSED"),
        (["--url", "http://no-such-host.invalid/", "--goal", "x"], "net::ERR_NAME_NOT_RESOLVED"),
        (["--url", "http://example.com[", "--goal", "x"], "invalid URL 'http://example.com['"),
        (["--url", DEAD, "--goal", "x", "--localizer-profile", "holotron"], "invalid choice"),
        (["--goal", "x"], "the following arguments are required: --url"),
    ],
    # Ids of their own: the dead port differs from one collection to the next (pytest-xdist's workers).
    ids=["no-url", "invalid", "scheme", "refused", "unresolved", "bracket", "bad-choice", "url-missing"],
)
def test_bad_input_is_one_line_exit_2(fake: FakeModelServer, args: list[str], message: str, tmp_path: Path) -> None:
    proc = webagent("run", *args, "--output", str(tmp_path / "out"), *role_flags(fake))
    assert proc.returncode == 2, proc.stderr
    *before, error = proc.stderr.strip().splitlines()
    assert message in error and error.startswith("webagent: error:") and "Traceback" not in proc.stderr
    if before:  # a start page that cannot be opened: what the run was doing when it failed, no more
        url = args[args.index("--url") + 1]
        assert before == [
            f"webagent {url}",
            "goal: x (localizer holo1.5)",
            "launching the browser...",
            f"opening {url}...",
        ]
    assert not (tmp_path / "out").exists()  # nothing written half-way


def test_no_endpoint_configured(tmp_path: Path) -> None:
    proc = webagent("run", "--url", DEAD, "--goal", "x", "--output", str(tmp_path / "o"))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "webagent: error: no base url configured for the policy model: set [policy] base_url in the config file, "
        "WEBAGENT_POLICY_BASE_URL, or --policy-base-url"
    ]


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[policy\nmodel = 'x'", "is not valid TOML"),
        ("[agent]\nmax_step = 3\n", "unknown config key 'agent.max_step'"),
        ("[polcy]\nmodel = 'x'\n", "unknown section [polcy]"),
        ("[localizer]\nprofile = 'holo9'\n", "invalid value for localizer.profile"),
    ],
)
def test_bad_config_file(toml: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "webagent.toml"
    path.write_text(toml)
    proc = webagent("run", "--url", DEAD, "--goal", "x", "--config", str(path))
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


BAD_CONFIGS = {
    "malformed TOML": ("[policy\nmodel = 'x'", "is not valid TOML"),
    "unknown key": ("[agent]\nmax_step = 3\n", "unknown config key 'agent.max_step'"),
    "bad value": ("[browser]\nsettle_timeout_s = -1\n", "browser.settle_timeout_s"),
}


@pytest.mark.parametrize("command", ["batch", "test"])
@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_stops_batch_and_test_before_anything_is_written(
    fake: FakeModelServer, tmp_path: Path, command: str, case: str
) -> None:
    toml, message = BAD_CONFIGS[case]
    config = tmp_path / "webagent.toml"
    config.write_text(toml)
    if command == "batch":
        inputs = tmp_path / "tasks.jsonl"
        inputs.write_text(json.dumps({"id": "a", "url": DEAD, "goal": "g"}) + "\n")
    else:
        inputs = tmp_path / "suite.yaml"
        inputs.write_text(f"- {{name: a, url: '{DEAD}', goal: g}}\n")
    out = tmp_path / "out"
    proc = webagent(command, str(inputs), "--config", str(config), "--output", str(out), *role_flags(fake))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("webagent: error:"), proc.stderr
    assert not out.exists()


def test_unreadable_config_file(tmp_path: Path) -> None:
    proc = webagent("run", "--url", DEAD, "--goal", "x", "--config", str(tmp_path / "missing.toml"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_config_file_and_env_drive_a_run(
    fake: FakeModelServer, site: SiteServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    """TOML for policy+validator, environment for the localizer, flags for the rest."""
    config = tmp_path / "webagent.toml"
    model = PROFILE_MODELS["holo2"]
    config.write_text(
        f'[policy]\nbase_url = "{fake.base_url("policy")}"\nmodel = "{model}"\n'
        f'[validator]\nbase_url = "{fake.base_url("validator")}"\nmodel = "{model}"\n'
        '[localizer]\nprofile = "holo1"\n[agent]\nmax_steps = 6\n'
    )
    env = {
        "WEBAGENT_LOCALIZER_BASE_URL": fake.base_url("localizer"),
        "WEBAGENT_LOCALIZER_MODEL": model,
        "WEBAGENT_LOCALIZER_PROFILE": "holo2",
    }
    task = local_tasks["catalog-price"]
    proc = webagent(
        "run",
        "--url",
        task["url"],
        "--goal",
        task["goal"],
        "--config",
        str(config),
        "--json",
        "--output",
        str(tmp_path / "run"),
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "(localizer holo2)" in proc.stderr  # env beat the TOML file


def test_demo_command(tmp_path: Path) -> None:
    proc = webagent("demo", "--output", str(tmp_path / "demo"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["success"] is True
    assert (tmp_path / "demo" / "report.html").exists()


def test_help_documents_every_option() -> None:
    proc = webagent("run", "--help")
    assert proc.returncode == 0
    for flag in (
        "--url",
        "--goal",
        "--config",
        "--output",
        "--json",
        "--policy-base-url",
        "--localizer-profile",
        "--validator-timeout-s",
        "--max-steps",
        "--viewport",
    ):
        assert flag in proc.stdout
