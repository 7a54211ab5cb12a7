"""Static invariants of the Docker image (docker/Dockerfile, .dockerignore) and its CI stage.

The real test is scripts/docker-ci.sh (a stage of .ci/run), which builds the image and runs suites in
it; these checks catch a broken invariant without a container engine.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from webagent.cli.run import IMAGE_VARIABLE
from webagent.config import load_config
from webagent.suite.model import load_suite

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "docker" / "Dockerfile"
STAGE = ROOT / "scripts" / "docker-ci.sh"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), " ".join(args.split())))
    assert not pending, "Dockerfile ends inside a continued line"
    return out


@pytest.fixture(scope="module")
def steps() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def env_vars(steps: list[tuple[str, str]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for keyword, args in steps:
        if keyword == "ENV":
            found.update(dict(re.findall(r"(\w+)=(\S+)", args)))
    return found


def test_instruction_parser() -> None:
    text = "# c\nFROM a\nRUN x \\\n  && y\n\nUSER u\n"
    assert instructions(text) == [("FROM", "a"), ("RUN", "x && y"), ("USER", "u")]


def test_base_user_and_entrypoint(steps: list[tuple[str, str]]) -> None:
    assert steps[0] == ("FROM", "debian:bookworm-slim")
    assert [k for k, _ in steps].count("FROM") == 1
    users = [args for keyword, args in steps if keyword == "USER"]
    assert users, "the image must switch to a non-root USER"
    assert users[-1].split(":")[0] not in ("root", "0")
    entrypoint = [args for keyword, args in steps if keyword == "ENTRYPOINT"]
    assert len(entrypoint) == 1 and json.loads(entrypoint[0]) == ["webagent"]


def test_the_image_says_it_is_the_image_and_works_in_the_folder_to_mount(steps: list[tuple[str, str]]) -> None:
    # A run directory is written under the working directory, which the CLI tells a user to mount.
    assert env_vars(steps)[IMAGE_VARIABLE] == "1"
    assert [args for keyword, args in steps if keyword == "WORKDIR"][-1] == "/work"
    readme = (ROOT / "docker" / "README.md").read_text()
    assert '-v "$PWD/webagent-out:/work" webagent demo' in readme


def test_debian_chromium_never_playwright_download(steps: list[tuple[str, str]]) -> None:
    env = env_vars(steps)
    # The variable must be one the config reads, and point at the Chromium that apt installs.
    config = load_config(env={k: v for k, v in env.items() if k.startswith("WEBAGENT_")})
    assert config.browser.executable_path == "/usr/bin/chromium"
    runs = " ".join(args for keyword, args in steps if keyword == "RUN")
    assert "playwright install" not in runs
    for package in ("chromium", "fonts-liberation", "fonts-dejavu-core", "libatomic1", "python3", "python3-venv"):
        assert re.search(rf"apt-get install [^&]*\b{re.escape(package)}(\s|$)", runs), package


def test_apt_layers_are_slim(steps: list[tuple[str, str]]) -> None:
    apt_runs = [args for keyword, args in steps if keyword == "RUN" and "apt-get install" in args]
    assert apt_runs
    for args in apt_runs:
        assert "--no-install-recommends" in args
        assert "rm -rf /var/lib/apt/lists/*" in args, "apt lists must be removed in the layer that fetched them"


def test_dependencies_layer_comes_before_the_source(steps: list[tuple[str, str]]) -> None:
    def index(pred: str) -> int:
        return next(i for i, (keyword, args) in enumerate(steps) if re.search(pred, f"{keyword} {args}"))

    deps = index(r"^RUN .*pip install .*-r ")
    assert index(r"^COPY pyproject\.toml ") < deps
    assert deps < index(r"^COPY webagent ")
    assert deps < index(r"^RUN .*pip install .*--no-deps ")


def test_copied_paths_cover_the_wheel(steps: list[tuple[str, str]]) -> None:
    """Everything hatch puts into the wheel is copied, exists, and is not excluded by .dockerignore."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wheel = project["tool"]["hatch"]["build"]["targets"]["wheel"]
    needed = {"pyproject.toml", project["project"]["readme"], *wheel["packages"], *wheel.get("force-include", {})}
    copied = {args.split()[0] for keyword, args in steps if keyword == "COPY" and not args.startswith("--from")}
    assert needed <= copied
    ignore = dockerignore()
    for path in copied:
        assert (ROOT / path).exists(), path
        assert not any(fnmatch.fnmatch(path, pattern) for pattern in ignore), f"{path} is in .dockerignore"


def dockerignore() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_dockerignore_excludes_local_state() -> None:
    ignore = dockerignore()
    for path in (".venv", ".git", "runs", ".mypy_cache", "webagent/__pycache__", "webagent/x.pyc"):
        assert any(fnmatch.fnmatch(path, p) for p in ignore), path


def test_ci_stage_script() -> None:
    subprocess.run(["bash", "-n", str(STAGE)], check=True)
    text = STAGE.read_text()
    marked = [line for line in text.splitlines() if "# SUITE-COMMAND" in line]
    assert len(marked) == 1, "exactly one line carries the container's suite command"
    for flag in ("--network=host", "--init", "--shm-size=1g"):
        assert flag in text
    assert "trap cleanup EXIT" in text
    assert not re.search(r"\b(pkill|killall)\b", text), "stop only the processes the stage started, by PID"
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("./scripts/test.sh") < ci.index("./scripts/docker-ci.sh")


@pytest.mark.parametrize(("name", "checks"), [("smoke.yaml", 3), ("failing.yaml", 2)])
def test_ci_suites_load(name: str, checks: int) -> None:
    suite = load_suite(ROOT / "docker" / "ci" / name, env={"SITE_URL": "http://127.0.0.1:9"})
    assert len(suite.checks) == checks
    assert all(c.url.startswith("http://127.0.0.1:9/") for c in suite.checks)
