"""Static invariants of the OpenEnv server's image (docker/env.Dockerfile); docker/Dockerfile's own are in
tests/test_docker.py, whose instruction parser this reuses."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from ..test_docker import instructions

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "docker" / "env.Dockerfile").read_text()
STEPS = instructions(TEXT)


def test_it_serves_openenv_on_all_interfaces_as_an_unprivileged_user() -> None:
    keywords = dict(STEPS)
    assert keywords["FROM"] == "debian:bookworm-slim" and keywords["USER"] == "webagent"
    entry = json.loads(keywords["ENTRYPOINT"])
    assert entry[:3] == ["webagent", "env", "serve"] and "0.0.0.0" in entry and "8000" in entry
    assert keywords["EXPOSE"] == "8000" and "/health" in keywords["HEALTHCHECK"]
    assert "WEBAGENT_BROWSER_EXECUTABLE_PATH=/usr/bin/chromium" in keywords["ENV"].split()[0] + " ".join(
        args for k, args in STEPS if k == "ENV"
    )


def test_it_installs_the_rl_extra_but_verifiers() -> None:
    run = " ".join(args for k, args in STEPS if k == "RUN")
    assert '["optional-dependencies"]["rl"]' in run and 'startswith("verifiers")' in run
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["rl"]
    assert any(r.startswith("openenv-core") for r in extras) and any(r.startswith("miniwob") for r in extras)
    copied = {args.split()[0] for k, args in STEPS if k == "COPY"}
    assert {"pyproject.toml", "webagent", "prompts"} <= copied  # the demo data is in webagent/testing/data


def test_it_shows_the_token_its_server_needs_on_all_interfaces() -> None:
    # Bound to 0.0.0.0 the server refuses to start without a token (tests/env/test_server_access.py).
    usage = [line for line in TEXT.splitlines() if line.startswith("#")]
    run = next(line for line in usage if "docker run" in line)
    assert "-e WEBAGENT_ENV_AUTH_TOKEN" in run and any("openssl rand" in line for line in usage)
    assert any("--auth-token-file" in line for line in usage)
    health = dict(STEPS)["HEALTHCHECK"]
    assert "/health" in health and "Authorization" not in health  # the public path
