"""Suite files for ``webagent test``: checks of a website, in YAML or JSONL.

YAML, either a list of checks or a mapping::

    name: shop smoke                 # optional (default: the file name)
    env: [SITE_URL]                  # optional: the environment variables its ${VAR} may read
    defaults: {max_steps: 15}        # optional: limits applied to every check
    budget: {calls: 200, usd: 1.5}   # optional: hard limits for the whole suite
    browser: {locale: fr-FR}         # optional: every check's context settings
    checks:
      - name: pricing
        url: ${SITE_URL}/            # ${VAR}: a variable of env (or WEBAGENT_SUITE_*), from the environment
        goal: Find the pricing page and start a trial
        expect: the trial sign-up form is shown   # optional: the validator must confirm it
        max_steps: 10                # optional per-check limits (see CHECK_LIMITS)
        browser: {device: iPhone 15} # optional: over the suite's browser settings

``browser`` holds ``[browser]`` session settings (``webagent.config.ContextSettings``): a ``locale``,
a ``device``, ...; relative paths are the suite file's.

A suite file is data unless the operator trusts it (``--trust-tasks``, ``load_suite(trusted=True)``),
like a task file (``webagent.tasks.distrust``): no ``{{NAME}}``, no ``browser`` key of
``UNTRUSTED_BROWSER_KEYS`` (a signed-in ``storage_state``, a ``proxy``, upload folders, ...), an
``http(s)`` start. Either way ``${VAR}`` reads only the variables the suite declares (``env``) or
that start with ``WEBAGENT_SUITE_``, never one named like a credential (``SECRET_VARIABLE``); the
values read are the suite's ``variables``, redacted as ``${VAR}`` from everything its runs write and
send (``AgentConfig.variables``).

JSONL: one check object per line (its variables: ``WEBAGENT_SUITE_*`` only). Every error names the
file and line.
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
from ..budget import BudgetLimits
from ..config import ContextSettings
from ..errors import InputError
from ..guard.urls import normalize_url
from ..inputs import MAX_GOAL_CHARS, load_json, load_yaml, read_text
from ..tasks import RUN_LIMITS, RunLimits, TaskOptions, TaskSpec, TraceMode, distrust

__all__ = ["CHECK_LIMITS", "SECRET_VARIABLE", "SUITE_PREFIX", "Check", "CheckOutcome", "Suite", "load_suite"]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: Variables a suite may read without declaring them.
SUITE_PREFIX = "WEBAGENT_SUITE_"
#: Names of variables no suite may read, declared or not: webagent's secrets, API keys, tokens,
#: passwords and the like (a suite's values end up in its outputs' place holders, never its own).
SECRET_VARIABLE = re.compile(
    r"^WEBAGENT_SECRET_|^OTEL_|API_?KEY|TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|PRIVATE_KEY|COOKIE",
    re.IGNORECASE,
)
_TOP_KEYS = ("name", "env", "defaults", "budget", "browser", "checks")


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

    def task(self, trace: TraceMode = "off", *, trusted: bool = True) -> TaskSpec:
        """The check as a task: its limits, its expectation and the trace kept are its options, its
        browser settings the task's; ``trusted``: its suite's trust (``TaskSpec.trusted``)."""
        options = TaskOptions.model_validate({**self.limits(), "expect": self.expect, "trace": trace})
        return TaskSpec(
            id=self.name, url=self.url, goal=self.goal, options=options, browser=self.browser, trusted=trusted
        )


class Suite(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    path: str
    checks: list[Check]
    budget: BudgetLimits = Field(default_factory=BudgetLimits)
    #: Whether the operator vouches for the file (``--trust-tasks``): its checks' tasks are then trusted.
    trusted: bool = False
    #: The values its ``${VAR}`` read, by name: redacted as ``${VAR}`` (``AgentConfig.variables``).
    variables: dict[str, str] = Field(default_factory=dict, exclude=True, repr=False)

    def tasks(self, trace: TraceMode = "off") -> list[TaskSpec]:
        """The checks as tasks, in order."""
        return [check.task(trace, trusted=self.trusted) for check in self.checks]


def load_suite(path: str | Path, env: Mapping[str, str] | None = None, *, trusted: bool = False) -> Suite:
    """Read a suite file (``.jsonl`` as JSON lines, anything else as YAML). ``env``: where ``${VAR}``
    are read (default ``os.environ``); ``trusted``: the operator vouches for the file (``--trust-tasks``)."""
    path = Path(path)
    env = os.environ if env is None else env
    text = read_text(path, "suite file")
    defaults: Any
    budget: Any
    declared: list[str] = []
    if path.suffix.lower() == ".jsonl":
        name, defaults, budget, items = path.stem, {}, {}, _jsonl_items(text, path)
    else:
        name, declared, defaults, budget, items = _yaml_items(text, path)
    variables = _Variables(env, declared, path)
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
                    data[key] = variables.expand(data[key])
            if isinstance(data.get("browser"), dict):
                data["browser"] = {
                    k: variables.expand(v) if isinstance(v, str) else v for k, v in data["browser"].items()
                }
            refusal = None if trusted else distrust(data)
            if refusal is not None:
                raise InputError(refusal)
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
    return Suite(
        name=name, path=str(path), checks=checks, budget=suite_budget, trusted=trusted, variables=variables.read
    )


class _Variables:
    """The environment variables a suite's ``${VAR}`` may read (declared in ``env``, or named
    ``WEBAGENT_SUITE_*``), and those it read."""

    def __init__(self, env: Mapping[str, str], declared: list[str], path: Path) -> None:
        self.env = env
        self.declared = set(declared)
        self.read: dict[str, str] = {}
        for name in declared:
            if SECRET_VARIABLE.search(name):
                raise InputError(
                    f"{path}: env: {name} is named like a secret or a key, which no suite may read; give a secret "
                    "to the agent as a secret ([secrets], --secret) and write {{NAME}} in a goal"
                )

    def expand(self, value: str) -> str:
        return _VAR.sub(self._value, value)

    def _value(self, m: re.Match[str]) -> str:
        name = m.group(1)
        if SECRET_VARIABLE.search(name):
            raise InputError(
                f"${{{name}}} is named like a secret or a key, which no suite may read; give a secret to the agent "
                "as a secret ([secrets], --secret) and write {{NAME}} in a goal"
            )
        if name not in self.declared and not name.startswith(SUITE_PREFIX):
            raise InputError(
                f"${{{name}}} reads an environment variable the suite does not declare: list it in the suite's "
                f"top-level env (env: [{name}]) or name it {SUITE_PREFIX}{name}"
            )
        if name not in self.env:
            raise InputError(f"environment variable {name} is not set (used as ${{{name}}})")
        self.read[name] = self.env[name]
        return self.env[name]


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


def _yaml_items(text: str, path: Path) -> tuple[str, list[str], Any, Any, list[tuple[int, Any]]]:
    """Parse YAML keeping the line each check starts on: name, declared variables, defaults, budget, checks."""
    try:
        node, data = load_yaml(text, str(path))
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark else ""
        raise InputError(f"{path}{line}: not valid YAML ({exc.problem or exc.context})") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{path}: not valid YAML ({exc})") from None
    name: str = path.stem
    declared: list[str] = []
    defaults: Any = {}
    budget: Any = {}
    seq = node
    if isinstance(data, dict) and isinstance(node, yaml.MappingNode):
        unknown = set(data) - set(_TOP_KEYS)
        if unknown:
            raise InputError(
                f"{path}: unknown top-level key {sorted(map(str, unknown))[0]!r} (known: {', '.join(_TOP_KEYS)})"
            )
        name = str(data.get("name") or name)
        declared = _declared(data.get("env"), path)
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
    checks = [(n.start_mark.line + 1, item) for n, item in zip(seq.value, data, strict=True)]
    return name, declared, defaults, budget, checks


def _declared(value: Any, path: Path) -> list[str]:
    """The suite's ``env``: a list of environment variable names (or one name)."""
    if value is None:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and _VAR.fullmatch(f"${{{n}}}") for n in names):
        raise InputError(f"{path}: env must be a list of environment variable names, e.g. env: [SITE_URL]")
    return list(names)


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
