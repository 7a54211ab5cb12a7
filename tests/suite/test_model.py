"""Suite files: YAML and JSONL, defaults, budgets, ${VAR} expansion, and one-line errors with line numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webagent.config import AgentSettings
from webagent.errors import InputError
from webagent.suite.model import load_suite

from ..strategies import JSON_VALUES, MESSY_TEXT, PROPERTIES, json_objects_with

ENV = {"SITE": "http://127.0.0.1:8080", "WEBAGENT_SUITE_SITE": "http://127.0.0.1:8081"}

FULL = """\
name: shop smoke
env: [SITE]
defaults:
  max_steps: 12
budget: {calls: 40, usd: 0.5}
checks:
  - name: pricing
    url: ${SITE}/pricing
    goal: Find the pricing page
    expect: the Pro plan price is shown

  - name: trial
    url: example.com
    goal: Start a trial
    max_steps: 5
    budget_calls: 9
"""


def write(tmp_path: Path, text: str, name: str = "suite.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_full_yaml_suite(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, FULL), env=ENV)
    assert suite.name == "shop smoke" and suite.budget.calls == 40 and suite.budget.usd == 0.5
    pricing, trial = suite.checks
    assert pricing.url == "http://127.0.0.1:8080/pricing" and pricing.expect == "the Pro plan price is shown"
    assert pricing.max_steps == 12 and pricing.line == 7
    assert trial.url == "https://example.com" and trial.max_steps == 5 and trial.line == 12
    assert suite.variables == {"SITE": ENV["SITE"]} and "variables" not in suite.model_dump()
    settings = trial.settings(AgentSettings())
    assert settings.max_steps == 5 and settings.budget_calls == 9 and settings.max_attempts == 3
    assert pricing.settings(AgentSettings(max_steps=30)).max_steps == 12


def test_a_plain_list_and_jsonl(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, "- {name: a, url: 'http://x.test/', goal: g}\n", "list.yml"), env={})
    assert suite.name == "list" and [c.name for c in suite.checks] == ["a"] and not suite.budget.active
    lines = (
        '# comment\n{"name": "a", "url": "http://x.test/", "goal": "g"}\n\n{"name": 2, "url": "x.test", "goal": "h"}\n'
    )
    suite = load_suite(write(tmp_path, lines, "s.jsonl"), env={})
    assert [(c.name, c.line) for c in suite.checks] == [("a", 2), ("2", 4)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "checks:\n  - name: a\n    url: http://x.test/\n    goal: g\n    max_step: 3\n",
            ":2: check 'a': unknown key 'max_step'",
        ),
        ("checks:\n  - name: a\n    url: http://x.test/\n", ":2: check 'a': missing required key 'goal'"),
        (
            "- {name: a, url: 'http://x.test/', goal: g}\n- {name: a, url: 'http://x.test/', goal: h}\n",
            ":2: duplicate check name 'a' (first on line 1)",
        ),
        ("- {name: a, url: '${NOPE}/x', goal: g}\n", ":1: check 'a': ${NOPE} reads an environment variable the suite"),
        (
            "env: [NOPE]\nchecks:\n  - {name: a, url: '${NOPE}/x', goal: g}\n",
            ":3: check 'a': environment variable NOPE is not set",
        ),
        ("env: {SITE: 1}\nchecks: []\n", "env must be a list of environment variable names"),
        ("- {name: a, url: 'ftp://x.test/', goal: g}\n", ":1: check 'a':"),
        ("- {name: a, url: 'http://x.test/', goal: g, max_steps: 0}\n", ":1: check 'a': max_steps:"),
        ("checks:\n  - name: a\n    url: [unclosed\n", ":4: not valid YAML"),
        ("- just a string\n", ":1: a check must be a mapping"),
        ("title: x\nchecks: []\n", "unknown top-level key 'title'"),
        ("checks: []\n", "has no checks"),
        ("name: only a name\n", "expected a list of checks"),
        ("budget: {calls: -1}\nchecks: []\n", "budget"),
        ("", "expected a list of checks"),
    ],
)
def test_bad_suites_are_one_line_errors(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_suite(path, env={})
    message = str(err.value)
    assert expected in message and "\n" not in message and str(path) in message


def test_a_variable_the_suite_does_not_declare_is_not_read(tmp_path: Path) -> None:
    # Set in the environment, but not the suite's: refused, whatever it holds.
    env = {"HOME_DIR": "/home/operator", "SITE": "http://127.0.0.1:8080"}
    path = write(tmp_path, "env: [SITE]\nchecks:\n  - {name: a, url: '${SITE}/', goal: 'read ${HOME_DIR}'}\n")
    with pytest.raises(InputError) as err:
        load_suite(path, env=env)
    assert str(err.value).startswith(f"{path}:3: check 'a': ${{HOME_DIR}} reads an environment variable the suite")
    assert "/home/operator" not in str(err.value)
    # Declared, or named WEBAGENT_SUITE_*, it is read (in JSONL, which declares nothing, only the latter).
    env["WEBAGENT_SUITE_USER"] = "ada-lovelace"
    path = write(tmp_path, "env: [SITE, HOME_DIR]\nchecks:\n  - {name: a, url: '${SITE}/', goal: '${HOME_DIR}'}\n")
    assert load_suite(path, env=env).variables == {"SITE": env["SITE"], "HOME_DIR": "/home/operator"}
    line = json.dumps({"name": "a", "url": "https://e.test/", "goal": "sign in as ${WEBAGENT_SUITE_USER}"})
    suite = load_suite(write(tmp_path, line, "s.jsonl"), env=env)
    assert suite.checks[0].goal == "sign in as ada-lovelace" and suite.variables == {
        "WEBAGENT_SUITE_USER": "ada-lovelace"
    }


@pytest.mark.parametrize(
    "text",
    [
        "env: [GITHUB_TOKEN]\nchecks: [{name: a, url: 'https://e.test/', goal: g}]\n",
        "env: [OPENAI_API_KEY]\nchecks: [{name: a, url: 'https://e.test/', goal: g}]\n",
        "checks: [{name: a, url: 'https://e.test/', goal: '${WEBAGENT_SECRET_PASSWORD}'}]\n",
        "checks: [{name: a, url: 'https://e.test/', goal: '${WEBAGENT_SUITE_DB_PASSWORD}'}]\n",
    ],
)
def test_a_variable_named_like_a_secret_is_never_read(tmp_path: Path, text: str) -> None:
    env = {n: "value-of-a-key" for n in ("GITHUB_TOKEN", "OPENAI_API_KEY", "WEBAGENT_SECRET_PASSWORD")}
    env["WEBAGENT_SUITE_DB_PASSWORD"] = "value-of-a-key"
    with pytest.raises(InputError, match="named like a secret or a key") as err:
        load_suite(write(tmp_path, text), env=env, trusted=True)
    assert "value-of-a-key" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (
            "browser: {storage_state: state.json}\nchecks: [{name: a, url: 'https://e.test/', goal: g}]\n",
            "browser.storage_state",
        ),
        ("checks: [{name: a, url: 'https://e.test/', goal: g, browser: {upload_dir: /home}}]\n", "browser.upload_dir"),
        ("checks: [{name: a, url: 'https://e.test/', goal: 'type {{PASSWORD}}'}]\n", "goal"),
        ("checks: [{name: a, url: 'file:///etc/passwd', goal: g}]\n", "url"),
        (
            "env: [HDR]\nchecks: [{name: a, url: 'https://e.test/', goal: g, browser: {user_agent: '${HDR}'}}]\n",
            "browser.user_agent",
        ),
    ],
)
def test_a_suite_not_trusted_is_data(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path, text)
    env = {"HDR": "{{PASSWORD}}"}  # a variable's value is checked as what it becomes
    with pytest.raises(InputError) as err:
        load_suite(path, env=env)
    message = str(err.value)
    assert re.match(rf"{re.escape(str(path))}:\d+: check 'a': {re.escape(key)}: ", message), message
    assert "--trust-tasks" in message and "\n" not in message
    suite = load_suite(path, env=env, trusted=True)
    assert suite.trusted and all(task.trusted for task in suite.tasks())


def test_bad_jsonl_line_and_missing_file(tmp_path: Path) -> None:
    path = write(tmp_path, '{"name": "a", "url": "http://x.test/", "goal": "g"}\n{not json\n', "s.jsonl")
    with pytest.raises(InputError, match=r"s\.jsonl:2: not valid JSON"):
        load_suite(path, env={})
    with pytest.raises(InputError, match="does not exist"):
        load_suite(tmp_path / "missing.yaml")


# ---------------------------------------------------------------- properties: any suite file at all

CHECK_KEYS = ["name", "url", "goal", "expect", "max_steps", "max_time_s", "max_attempts", "budget_calls"]
_URLS = st.sampled_from(
    ["http://127.0.0.1:8000/a", "example.com", "${WEBAGENT_SUITE_SITE}/x", "${NOPE}", "ftp://x", ""]
)
_SAFE = st.text(st.characters(exclude_categories=("Cs", "Cc")), min_size=1, max_size=30).filter(str.strip)
_CHECKS = json_objects_with(CHECK_KEYS, st.one_of(_URLS, _SAFE, st.integers(-2, 50), JSON_VALUES))
_VALID = st.builds(
    lambda n, u, g: {"name": n, "url": u, "goal": g},
    _SAFE,
    _URLS.filter(lambda u: "NOPE" not in u and "ftp" not in u and u),
    _SAFE,
)


def _expect_line_error_or_none(message: str, path: Path) -> None:
    assert "\n" not in message and str(path) in message


@settings(parent=PROPERTIES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(st.one_of(_CHECKS, _VALID, JSON_VALUES), max_size=6), wrapped=st.booleans())
def test_any_yaml_suite_loads_or_is_a_one_line_error(tmp_path: Path, items: list[Any], wrapped: bool) -> None:
    path = write(tmp_path, yaml.safe_dump({"checks": items} if wrapped else items, allow_unicode=True))
    try:
        suite = load_suite(path, env=ENV)
    except InputError as exc:
        _expect_line_error_or_none(str(exc), path)
    else:
        assert [c.name for c in suite.checks] == [str(i["name"]) for i in items]


@settings(parent=PROPERTIES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(_CHECKS.map(json.dumps), MESSY_TEXT.map(lambda t: " ".join(t.split()))), max_size=6))
def test_any_jsonl_suite_loads_or_names_the_line(tmp_path: Path, lines: list[str]) -> None:
    path = write(tmp_path, "\n".join(lines), "any.jsonl")
    try:
        load_suite(path, env=ENV)
    except InputError as exc:
        message = str(exc)
        _expect_line_error_or_none(message, path)
        where = re.match(rf"{re.escape(str(path))}:(\d+): ", message)
        if where:
            assert lines[int(where.group(1)) - 1].strip()


@settings(parent=PROPERTIES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    checks=st.lists(_VALID, min_size=1, max_size=5, unique_by=lambda c: c["name"]),
    blank=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_generated_suites_keep_their_line_numbers(
    tmp_path: Path, checks: list[dict[str, Any]], blank: list[bool]
) -> None:
    lines: list[str] = []
    expected: list[int] = []
    for check, gap in zip(checks, blank, strict=False):
        if gap:
            lines.append("# a comment")
        expected.append(len(lines) + 1)
        lines.append(json.dumps(check))
    jsonl = load_suite(write(tmp_path, "\n".join(lines), "gen.jsonl"), env=ENV)
    assert [c.line for c in jsonl.checks] == expected
    text = yaml.safe_dump({"name": "gen", "checks": checks}, allow_unicode=True, width=10_000)
    starts = [n for n, line in enumerate(text.splitlines(), start=1) if line.startswith("- ")]
    suite = load_suite(write(tmp_path, text), env=ENV)
    assert [c.line for c in suite.checks] == starts
    assert [(c.name, c.goal) for c in suite.checks] == [(c["name"], c["goal"]) for c in checks]


def test_yaml_anchors_and_aliases_within_the_limit_still_work(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "common: &common\n  url: https://example.com/\n  max_steps: 4\nchecks:\n"
        "  - {<<: *common, name: a, goal: first}\n  - {<<: *common, name: b, goal: second}\n"
    )
    with pytest.raises(InputError, match="unknown top-level key 'common'"):  # the aliases themselves are fine
        load_suite(path)
    path.write_text(
        "defaults: &d {max_steps: 4}\nchecks:\n  - name: a\n    url: https://example.com/\n    goal: g\n    <<: *d\n"
    )
    assert load_suite(path).checks[0].max_steps == 4
