"""Suite files for ``webagent test``: checks of a website, in YAML or JSONL.

YAML, either a list of checks or a mapping::

    name: shop smoke                 # optional (default: the file name)
    defaults: {max_steps: 15}        # optional: limits applied to every check
    budget: {calls: 200, usd: 1.5}   # optional: hard limits for the whole suite
    browser: {storage_state: state.json, locale: fr-FR}   # optional: every check's context settings
    checks:
      - name: pricing
        url: ${SITE_URL}/            # ${VAR} is read from the environment
        goal: Find the pricing page and start a trial
        expect: the trial sign-up form is shown   # optional: the validator must confirm it
        max_steps: 10                # optional per-check limits (see CHECK_LIMITS)
        browser: {device: iPhone 15} # optional: over the suite's browser settings

``browser`` holds ``[browser]`` session settings (``webagent.config.ContextSettings``): a signed-in
``storage_state``, a ``proxy``, ``locale``, ``device``, ...; relative paths are the suite file's.

JSONL: one check object per line. Every error names the file and line.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..batch.results import TaskResult
from ..batch.tasks import RUN_LIMITS, RunLimits, TaskOptions, TaskSpec
from ..budget import BudgetLimits
from ..config import ContextSettings
from ..errors import InputError
from ..inputs import MAX_GOAL_CHARS, load_json, load_yaml, read_text
from ..stream import TraceMode
from ..urls import normalize_url

__all__ = ["CHECK_LIMITS", "Check", "CheckOutcome", "Suite", "load_suite"]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


#: Per-check keys that override the config's ``[agent]`` settings.
CHECK_LIMITS = RUN_LIMITS


class Check(RunLimits):
    """One check: a task whose verdict comes from the validator (and ``expect``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    url: str
    goal: str = Field(min_length=1, max_length=MAX_GOAL_CHARS)
    expect: str | None = Field(default=None, max_length=MAX_GOAL_CHARS)
    #: The context settings of the check's browser session, over the config's ``[browser]``.
    browser: ContextSettings | None = None
    line: int = Field(default=0, exclude=True, description="Line of the suite file it starts on")

    def task(self, trace: TraceMode = "off") -> TaskSpec:
        """The check as a task: its limits, its expectation and the trace kept are its options, its
        browser settings the task's."""
        options = TaskOptions.model_validate({**self.limits(), "expect": self.expect, "trace": trace})
        return TaskSpec(id=self.name, url=self.url, goal=self.goal, options=options, browser=self.browser)


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    path: str
    checks: list[Check]
    budget: BudgetLimits = Field(default_factory=BudgetLimits)


def load_suite(path: str | Path, env: Mapping[str, str] | None = None) -> Suite:
    """Read a suite file (``.jsonl`` as JSON lines, anything else as YAML)."""
    path = Path(path)
    env = os.environ if env is None else env
    text = read_text(path, "suite file")
    defaults: Any
    budget: Any
    if path.suffix.lower() == ".jsonl":
        name, defaults, budget, items = path.stem, {}, {}, _jsonl_items(text, path)
    else:
        name, defaults, budget, items = _yaml_items(text, path)
    try:
        own = {k: v for k, v in defaults.items() if k != "browser"} if isinstance(defaults, dict) else defaults
        limits = RunLimits.model_validate(own).model_dump(exclude_none=True)
        if isinstance(defaults, dict) and defaults.get("browser") is not None:
            limits["browser"] = defaults["browser"]  # as written: merged with each check's, then validated
    except ValidationError as exc:
        raise InputError(f"{path}: defaults: {_first_error(exc, 'defaults')}") from None
    try:
        suite_budget = BudgetLimits.model_validate(budget)
    except ValidationError as exc:
        raise InputError(f"{path}: budget: {_first_error(exc, 'budget')}") from None
    checks: list[Check] = []
    seen: dict[str, int] = {}
    for line, item in items:
        where = f"{path}:{line}"
        if not isinstance(item, dict):
            raise InputError(f"{where}: a check must be a mapping with name, url and goal")
        data = {**limits, **item}
        if isinstance(limits.get("browser"), dict) and isinstance(item.get("browser"), dict):
            data["browser"] = {**limits["browser"], **item["browser"]}  # the check's over the suite's
        label = f"check {data.get('name')!r}" if data.get("name") else "check"
        try:
            for key in ("url", "goal", "expect"):
                if isinstance(data.get(key), str):
                    data[key] = _expand(data[key], env)
            if isinstance(data.get("browser"), dict):
                data["browser"] = {k: _expand(v, env) if isinstance(v, str) else v for k, v in data["browser"].items()}
            if isinstance(data.get("name"), int | float) and not isinstance(data.get("name"), bool):
                data["name"] = str(data["name"])
            check = Check.model_validate({**data, "line": line})
            browser = check.browser.relative_to(path.parent) if check.browser is not None else None
            check = check.model_copy(update={"url": normalize_url(check.url), "browser": browser})
        except ValidationError as exc:
            raise InputError(f"{where}: {label}: {_first_error(exc, 'check')}") from None
        except InputError as exc:
            raise InputError(f"{where}: {label}: {exc}") from None
        if check.name in seen:
            raise InputError(f"{where}: duplicate check name {check.name!r} (first on line {seen[check.name]})")
        seen[check.name] = line
        checks.append(check)
    if not checks:
        raise InputError(f"suite file {path} has no checks")
    return Suite(name=name, path=str(path), checks=checks, budget=suite_budget)


def _expand(value: str, env: Mapping[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in env:
            raise InputError(f"environment variable {m.group(1)} is not set (used as ${{{m.group(1)}}})")
        return env[m.group(1)]

    return _VAR.sub(sub, value)


def _first_error(exc: ValidationError, what: str) -> str:
    # An unknown key first: a typo ("gaol") also makes the key it meant missing.
    err = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
    loc = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        known = ", ".join(f for f in Check.model_fields if f != "line") if what == "check" else ""
        return f"unknown key {loc!r}" + (f" (known keys: {known})" if known else "")
    if err["type"] == "missing":
        return f"missing required key {loc!r}"
    return f"{loc}: {err['msg']}" if loc else err["msg"]


def _jsonl_items(text: str, path: Path) -> list[tuple[int, Any]]:
    items: list[tuple[int, Any]] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            items.append((number, load_json(line, f"{path}:{number}")))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
    return items


def _yaml_items(text: str, path: Path) -> tuple[str, Any, Any, list[tuple[int, Any]]]:
    """Parse YAML keeping the line each check starts on."""
    try:
        node, data = load_yaml(text, str(path))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise InputError(f"{path}{line}: not valid YAML ({exc.problem or exc.context})") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML ({exc})") from None
    name: str = path.stem
    defaults: Any = {}
    budget: Any = {}
    seq = node
    if isinstance(data, dict) and isinstance(node, yaml.MappingNode):
        unknown = set(data) - {"name", "defaults", "budget", "browser", "checks"}
        if unknown:
            raise InputError(
                f"{path}: unknown top-level key {sorted(map(str, unknown))[0]!r} "
                "(known: name, defaults, budget, browser, checks)"
            )
        name = str(data.get("name") or name)
        defaults = data.get("defaults") or {}
        if data.get("browser") is not None:
            if not isinstance(defaults, dict):
                raise InputError(f"{path}: 'defaults' must be a mapping")
            defaults = {**defaults, "browser": data["browser"]}
        budget = data.get("budget") or {}
        if not isinstance(defaults, dict) or not isinstance(budget, dict):
            raise InputError(f"{path}: 'defaults' and 'budget' must be mappings")
        data = data.get("checks")
        seq = next((v for k, v in node.value if k.value == "checks"), None)
    if not isinstance(data, list) or not isinstance(seq, yaml.SequenceNode):
        raise InputError(f"{path}: expected a list of checks (or a mapping with a 'checks' list)")
    return name, defaults, budget, [(n.start_mark.line + 1, item) for n, item in zip(seq.value, data, strict=True)]


class CheckOutcome(BaseModel):
    """A check and its result, in suite order."""

    check: Check
    result: TaskResult | None = None

    @property
    def passed(self) -> bool:
        return self.result is not None and self.result.success

    @property
    def reason(self) -> str:
        """Why it failed, in words: the validator's last feedback, else the stop message."""
        if self.result is None:
            return "not run (the suite was interrupted)"
        feedback = [f for r in self.result.attempt_records for f in r.feedback if f]
        stop = f"{self.result.stop_reason}: {self.result.message}"
        if self.passed:
            return feedback[-1] if feedback else stop
        return f"{feedback[-1]} ({stop})" if feedback and self.result.stop_reason == "answered" else stop
