"""Bad input through the real CLI: each limit broken is one line naming the file and the limit, exit 2,
quickly -- never a traceback, a process eating memory, or a run directory shared by two tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webagent.errors import InputError
from webagent.inputs import MAX_GOAL_CHARS, MAX_NESTING, MAX_YAML_VALUES
from webagent.tasks import load_tasks, run_dir_name

from .test_cli import webagent

pytestmark = pytest.mark.e2e

#: No model is ever asked: every command below fails on its input first.
ROLES = [
    arg for role in ("policy", "localizer", "validator") for arg in (f"--{role}-base-url", "http://127.0.0.1:9/v1")
]
ROLES += ["--model", "m", "--api-key", "offline"]
DEEP = 5000  # far past Python's recursion limit


def _yaml_bomb(levels: int = 9) -> str:
    """A few hundred bytes that expand to 9**levels values (a "billion laughs")."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "name: bomb\nchecks:\n  - name: x\n    url: https://example.com\n    goal: g\nbomb:\n" + "\n".join(
        "  " + line for line in lines
    )


def _one_line(proc: object, *needles: str) -> None:
    code, stderr = proc.returncode, proc.stderr  # type: ignore[attr-defined]
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("webagent: error:"), stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _task(**fields: object) -> str:
    return json.dumps({"id": "t", "url": "https://example.com", "goal": "g", **fields})


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        (
            '{"id": "t", "url": "https://example.com", "goal": "g", "x": ' + "[" * DEEP + "]" * DEEP + "}",
            [":1:", f"nested deeper than {MAX_NESTING} levels"],
        ),
        (
            '{"id": "t", "url": "https://example.com", "goal": "g", "x": ' + "[" * 40 + "]" * 40 + "}",
            [":1:", f"{MAX_NESTING} levels"],
        ),
        (_task(goal="x" * (MAX_GOAL_CHARS + 1)), [":1:", f"the limit is {MAX_GOAL_CHARS}"]),
        (_task(id=True), [":1:", "task id must be a non-empty string, not true"]),
        (_task(id=None), [":1:", "task id must be a non-empty string, not null"]),
        (_task(id="a/b") + "\n" + _task(id="a_b-3ec69c85"), []),  # two runs, two directories: accepted
        (_task(id="Task") + "\n" + _task(id="task"), ["'Task' and 'task' would share the run directory"]),
    ],
)
def test_task_file_limits(tmp_path: Path, content: str, needles: list[str]) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(content + "\n")
    if not needles:
        loaded = load_tasks(tasks)
        assert len({run_dir_name(t.id) for t in loaded}) == len(loaded) == 2
        return
    proc = webagent("batch", str(tasks), "--output", str(tmp_path / "out"), *ROLES, timeout=60)
    _one_line(proc, str(tasks), *needles)
    assert not (tmp_path / "out").exists()


def test_a_task_file_too_large_is_refused_unread(tmp_path: Path) -> None:
    tasks = tmp_path / "huge.jsonl"
    with tasks.open("wb") as fh:
        fh.truncate(65 * 1024 * 1024)  # sparse: nothing is written, nothing read
    proc = webagent("batch", str(tasks), "--output", str(tmp_path / "out"), *ROLES, timeout=60)
    _one_line(proc, str(tasks), "larger than 64 MiB", "the limit for a task file")


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        (_yaml_bomb(), [f"expand to more than {MAX_YAML_VALUES} values"]),
        ("a: &a [*a]\nchecks: []\n", ["refers to the value it is part of"]),
        (
            "checks:\n  - name: x\n    url: https://example.com\n    goal: " + "[" * DEEP + "]" * DEEP + "\n",
            [f"nested deeper than {MAX_NESTING} levels"],
        ),
        ("checks:\n  - name: true\n    url: https://example.com\n    goal: g\n", [":2:", "name"]),
        (
            "checks:\n  - name: x\n    url: https://example.com\n    goal: " + "x" * (MAX_GOAL_CHARS + 1) + "\n",
            [":2:", f"at most {MAX_GOAL_CHARS} characters"],
        ),
    ],
)
def test_suite_file_limits(tmp_path: Path, content: str, needles: list[str]) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(content)
    proc = webagent("test", str(suite), "--output", str(tmp_path / "out"), *ROLES, timeout=60)
    _one_line(proc, str(suite), *needles)


def test_a_suite_file_in_json_lines_is_limited_too(tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"name": "x", "url": "https://example.com", "goal": ' + "[" * DEEP + "]" * DEEP + "}\n")
    proc = webagent("test", str(suite), "--output", str(tmp_path / "out"), *ROLES, timeout=60)
    _one_line(proc, f"{suite}:1:", f"{MAX_NESTING} levels")


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        ("[agent]\nx = " + "[" * DEEP + "]" * DEEP + "\n", [f"nested deeper than {MAX_NESTING} levels"]),
        ("[agent]\nx = " + "[" * 40 + "]" * 40 + "\n", [f"nested deeper than {MAX_NESTING} levels"]),
        ("[agent]\n" + "# filler\n" * 200_000, ["larger than 1 MiB", "the limit for a config file"]),
    ],
)
def test_config_file_limits(tmp_path: Path, content: str, needles: list[str]) -> None:
    config = tmp_path / "webagent.toml"
    config.write_text(content)
    proc = webagent("run", "--config", str(config), "--url", "https://example.com", "--goal", "g", *ROLES, timeout=60)
    _one_line(proc, str(config), *needles)


def test_a_goal_too_long_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "run"
    goal = "x" * (MAX_GOAL_CHARS + 1)
    proc = webagent("run", "--url", "https://example.com", "--goal", goal, "--output", str(out), *ROLES, timeout=60)
    _one_line(proc, "--goal is", f"the limit is {MAX_GOAL_CHARS}")
    assert not out.exists()


def test_limits_are_input_errors_in_the_library(tmp_path: Path) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text(_task(id=False) + "\n")
    with pytest.raises(InputError, match="not false"):
        load_tasks(tasks)
