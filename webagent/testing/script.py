"""Script format for the offline fake model server: models, loading and matching rules.

A script holds tasks (policy rules, validator rules, elements) for runs, and, at the top level,
``checks`` and ``extracts`` rules for ``Pilot.check`` and ``Pilot.extract`` requests: how those
are written and judged is in :mod:`webagent.testing.pagechecks`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from webagent.families import DEFAULT_PROFILE, FAMILIES, PROFILES, family_of
from webagent.records import Role

from .pagechecks import CheckRule, ExtractRule

FaultKind = Literal["500", "429", "malformed", "schema", "slow", "offtarget", "disconnect", "stall"]

#: Fixed order in which probabilistic faults are drawn.
FAULT_KINDS: tuple[FaultKind, ...] = (
    "500",
    "429",
    "malformed",
    "schema",
    "slow",
    "offtarget",
    "disconnect",
    "stall",
)
#: Faults that spoil the reply's content (the others fail the HTTP exchange).
REPLY_FAULTS: frozenset[FaultKind] = frozenset({"malformed", "schema", "offtarget"})

FEEDBACK_HEADER = "Validator feedback on your last answer:"
EVENTS_HEADER = "Page events since the last step:"

Point = tuple[float, float]
NonNegative = Annotated[float, Field(ge=0)]
Rate = Annotated[float, Field(ge=0, le=1)]


@dataclass(frozen=True)
class PromptState:
    """What the server parsed out of a policy prompt."""

    url: str | None = None
    step: int | None = None
    last_action: str | None = None
    feedback: str | None = None
    final: bool = False
    events: tuple[str, ...] = ()


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Viewport(_Model):
    """Browser viewport in CSS pixels."""

    width: int = Field(default=1280, gt=0)
    height: int = Field(default=800, gt=0)


class When(_Model):
    """Conditions of a policy rule; all given conditions must hold."""

    step: int | None = None
    url: str | None = None
    last_action: str | None = None
    feedback: str | None = None
    no_feedback: bool | None = None
    final: bool | None = None
    #: A page event of this step (``Page events since the last step``) holds this text.
    event: str | None = None

    def matches(self, state: PromptState) -> bool:
        """True when every set condition holds for ``state``."""
        return all(
            (
                self.step is None or self.step == state.step,
                self.url is None or _contains(state.url, self.url),
                self.last_action is None or _contains(state.last_action, self.last_action),
                self.feedback is None or _contains(state.feedback, self.feedback),
                self.no_feedback is None or self.no_feedback == (state.feedback is None),
                self.final is None or self.final == state.final,
                self.event is None or any(_contains(e, self.event) for e in state.events),
            )
        )


class PolicyRule(_Model):
    """One scripted policy reply: one ``action``, or several (``actions``, written as the request
    allows: a list, parallel tool calls, or the first alone where only one is asked for)."""

    when: When = Field(default_factory=When)
    note: str | None = None
    thought: str | None = None
    action: dict[str, Any] | None = None
    actions: list[dict[str, Any]] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_of(self) -> PolicyRule:
        if (self.action is None) == (self.actions is None):
            raise ValueError("a policy rule gives either 'action' or 'actions'")
        return self

    @property
    def all_actions(self) -> list[dict[str, Any]]:
        """The rule's actions, in order."""
        return self.actions if self.actions is not None else [self.action or {}]

    def reply(self) -> str:
        """The reply content (a JSON object string, in webagent's shape)."""
        acts = self.all_actions
        body: dict[str, Any] = {"action": acts[0]} if len(acts) == 1 else {"actions": acts}
        return json.dumps({"note": self.note or "", "thought": self.thought or "", **body})


class ValidatorRule(_Model):
    """How the scripted validator judges a candidate answer."""

    accept: list[str] = Field(min_length=1)
    url: str | None = None
    feedback: str | None = None

    def judge(self, answer: str, url: str | None) -> tuple[bool, str]:
        """Return ``(success, feedback)`` for a candidate answer seen at ``url``."""
        low = answer.lower()
        ok = any(a.lower() in low for a in self.accept) and (self.url is None or _contains(url, self.url))
        return ok, "Looks correct." if ok else self.feedback or "The answer is not correct."


class Task(_Model):
    """A scripted task, selected by a substring of the goal."""

    id: str = Field(min_length=1)
    match: str
    elements: dict[str, Point] = Field(default_factory=dict)
    policy: list[PolicyRule] = Field(default_factory=list)
    validator: ValidatorRule | None = None

    def policy_rule(self, state: PromptState) -> PolicyRule | None:
        """The first rule whose conditions hold, if any."""
        return next((r for r in self.policy if r.when.matches(state)), None)

    def judge(self, answer: str, url: str | None) -> tuple[bool, str]:
        """Validator verdict; a task without ``validator`` accepts any answer."""
        return self.validator.judge(answer, url) if self.validator else (True, "Looks correct.")


class Fault(_Model):
    """A deterministic fault: the ``nth`` request to ``role`` gets ``kind``."""

    role: Role
    nth: int = Field(ge=1)
    kind: FaultKind


class Script(_Model):
    """A whole fake-model script."""

    viewport: Viewport = Field(default_factory=Viewport)
    localizer_profile: str = DEFAULT_PROFILE
    latency_s: NonNegative | dict[Role, NonNegative] = 0.0
    elements: dict[str, Point] = Field(default_factory=dict)
    tasks: list[Task] = Field(default_factory=list)
    #: How statements about a page are judged and what extractions answer (``webagent.testing.pagechecks``).
    checks: list[CheckRule] = Field(default_factory=list)
    extracts: list[ExtractRule] = Field(default_factory=list)
    faults: list[Fault] = Field(default_factory=list)
    fault_rates: dict[FaultKind, Rate] = Field(default_factory=dict)
    seed: int = 0
    retry_after_s: Annotated[int, Field(ge=0)] | NonNegative = 1
    slow_s: NonNegative = 30.0
    #: "random": each rate is drawn per request; "even": faults come at exactly those rates, spread
    #: evenly (each kind at a seeded phase), so that any run of requests gets its share.
    fault_schedule: Literal["random", "even"] = "random"
    #: Whether reply faults from ``fault_rates`` (malformed, schema, offtarget) may hit repair requests.
    fault_repairs: bool = True
    models: dict[Role, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_profile(self) -> Script:
        if self.localizer_profile not in PROFILES:
            raise ValueError(f"localizer_profile must be one of {', '.join(PROFILES)}, got {self.localizer_profile!r}")
        return self

    @model_validator(mode="after")
    def _unique_task_ids(self) -> Script:
        seen: set[str] = set()
        for task in self.tasks:
            if task.id in seen:
                raise ValueError(f"duplicate task id {task.id!r}")
            seen.add(task.id)
        return self

    def latency(self, role: Role) -> float:
        """Seconds to wait before answering a ``role`` request."""
        return self.latency_s.get(role, 0.0) if isinstance(self.latency_s, dict) else self.latency_s

    def model_name(self, role: Role) -> str:
        """The model name advertised for ``role``."""
        default = f"fake-localizer-{self.localizer_profile}" if role == "localizer" else f"fake-{role}"
        return self.models.get(role, default)

    def task_for(self, text: str) -> Task | None:
        """The first task whose ``match`` occurs in ``text``."""
        return next((t for t in self.tasks if t.match in text), None)

    def all_elements(self) -> dict[str, Point]:
        """Top-level elements merged with every task's (later definitions win)."""
        merged = dict(self.elements)
        for task in self.tasks:
            merged.update(task.elements)
        return merged

    def find_element(self, text: str) -> tuple[str, Point] | None:
        """The longest element key occurring (case-insensitively) in ``text``."""
        low = text.lower()
        hits = [(k, p) for k, p in self.all_elements().items() if k.lower() in low]
        return max(hits, key=lambda kp: len(kp[0]), default=None)


# ---------------------------------------------------------------- prompts and replies


_URL_LINE = re.compile(r"^Current URL: (.*)$", re.M)
_STEP_LINE = re.compile(r"^Step: (\d+)", re.M)
_ACTION_LINES = re.compile(r"^- step \d+:.*$", re.M)


def parse_policy_prompt(text: str) -> PromptState:
    """Extract URL, step, last action, validator feedback, the final flag and the page events from a policy prompt."""
    url = _URL_LINE.search(text)
    step = _STEP_LINE.search(text)
    actions = _ACTION_LINES.findall(text)
    feedback: str | None = None
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip() == FEEDBACK_HEADER), None)
    if start is not None:
        block: list[str] = []
        for line in lines[start + 1 :]:
            if not line.strip():
                break
            block.append(line)
        feedback = "\n".join(block)
    events: list[str] = []
    start = next((i for i, ln in enumerate(lines) if ln.strip() == EVENTS_HEADER), None)
    if start is not None:
        for line in lines[start + 1 :]:
            if not line.startswith("- "):
                break
            events.append(line[2:])
    return PromptState(
        url=url.group(1).strip() if url else None,
        step=int(step.group(1)) if step else None,
        last_action=actions[-1] if actions else None,
        feedback=feedback,
        final="FINAL STEP" in text,
        events=tuple(events),
    )


def candidate_answer(texts: list[str]) -> str:
    """The text after ``Candidate answer:`` in the validator prompt's text part."""
    for text in texts:
        i = text.find("Candidate answer:")
        if i >= 0:
            return text[i + len("Candidate answer:") :].strip()
    return ""


def localizer_profile(model: str, default: str) -> str:
    """The localizer profile a model name tells (``default`` when it tells none that localizes)."""
    family = family_of(model)
    return family.name if family is not None and family.name in PROFILES else default


def format_click(profile: str, x: int, y: int, width: int, height: int) -> str:
    """A click at image pixel (x, y) in the profile's reply format."""
    contract = FAMILIES[profile].localizer
    assert contract is not None, f"{profile} has no localization contract"
    match contract.reply:
        case "click_text":
            return f"Click({x}, {y})"
        case "normalised_json":
            return json.dumps({"x": round(x / width * 1000), "y": round(y / height * 1000)})
        case "absolute_json":
            return json.dumps({"action": "click_absolute", "x": x, "y": y})


def _contains(haystack: str | None, needle: str) -> bool:
    return haystack is not None and needle in haystack


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "<top level>"
    more = f" (+{err.error_count() - 1} more errors)" if err.error_count() > 1 else ""
    return f"{loc}: {first['msg']}{more}"


def load_script(source: Script | Mapping[str, Any] | str | Path) -> Script:
    """Load and validate a script from a file path or a dict; raise a one-line ``ValueError`` if bad."""
    if isinstance(source, Script):
        return source
    if isinstance(source, Mapping):
        name, data = "<dict>", dict(source)
    else:
        path = Path(source)
        name = str(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"script {name}: file not found") from None
        except OSError as exc:
            raise ValueError(f"script {name}: cannot read file ({exc.strerror or exc})") from None
        except UnicodeDecodeError:
            raise ValueError(f"script {name}: file is not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"script {name}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            ) from None
    if not isinstance(data, dict):
        raise ValueError(f"script {name}: top level must be a JSON object, got {type(data).__name__}")
    try:
        return Script.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"script {name}: {_describe(exc)}") from None
