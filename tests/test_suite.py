"""Suite files: YAML and JSONL, defaults, budgets, ${VAR} expansion, and one-line errors with line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from webagent.config import AgentSettings
from webagent.errors import InputError
from webagent.suite import load_suite

ENV = {"SITE": "http://127.0.0.1:8080"}

FULL = """\
name: shop smoke
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
    assert pricing.max_steps == 12 and pricing.line == 6
    assert trial.url == "https://example.com" and trial.max_steps == 5 and trial.line == 11
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
        ("- {name: a, url: '${NOPE}/x', goal: g}\n", ":1: check 'a': environment variable NOPE is not set"),
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


def test_bad_jsonl_line_and_missing_file(tmp_path: Path) -> None:
    path = write(tmp_path, '{"name": "a", "url": "http://x.test/", "goal": "g"}\n{not json\n', "s.jsonl")
    with pytest.raises(InputError, match=r"s\.jsonl:2: not valid JSON"):
        load_suite(path, env={})
    with pytest.raises(InputError, match="does not exist"):
        load_suite(tmp_path / "missing.yaml")
