"""Typed records the loop yields and the CLI, the trajectory writer and the tests consume."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from .actions import Action
from .images import Screenshot

__all__ = [
    "CheckResult",
    "Fingerprint",
    "ModelCall",
    "Point",
    "PromptContext",
    "RoleUsage",
    "RunResult",
    "Step",
    "StopReason",
    "Timings",
    "Usage",
    "Verdict",
]

StopReason = Literal["answered", "max_steps", "max_time", "budget", "error", "needs_human"]
Role = Literal["policy", "localizer", "validator"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RoleUsage(_Record):
    """Usage of one model role, summed over calls."""

    calls: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = Field(
        default=0,
        description="Of the prompt tokens, those the server served from its prefix cache, as it reported them "
        "(usage.prompt_tokens_details.cached_tokens; 0 when it does not: vLLM needs --enable-prompt-tokens-details)",
    )
    completion_tokens: int = 0
    latency_s: float = 0.0
    retries: int = 0
    repairs: int = 0
    failures: int = 0

    def add(self, other: RoleUsage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.cached_tokens += other.cached_tokens
        self.completion_tokens += other.completion_tokens
        self.latency_s += other.latency_s
        self.retries += other.retries
        self.repairs += other.repairs
        self.failures += other.failures


class Usage(_Record):
    """Usage per role."""

    policy: RoleUsage = Field(default_factory=RoleUsage)
    localizer: RoleUsage = Field(default_factory=RoleUsage)
    validator: RoleUsage = Field(default_factory=RoleUsage)

    def role(self, name: str) -> RoleUsage:
        usage: RoleUsage = getattr(self, name)
        return usage

    def add_call(self, call: ModelCall) -> None:
        self.role(call.role).add(call.usage)


class ModelCall(_Record):
    """One logical model call (retries and a repair included)."""

    role: Role
    model: str
    raw: list[str] = Field(default_factory=list, description="Raw reply texts, the repaired one last")
    usage: RoleUsage = Field(default_factory=RoleUsage)
    error: str | None = None


class Point(_Record):
    """A click point in both spaces."""

    image: tuple[float, float] = Field(description="Pixels of the screenshot sent to the localizer")
    viewport: tuple[float, float] = Field(description="CSS pixels of the viewport")


class Verdict(_Record):
    success: bool
    feedback: str


class Fingerprint(_Record):
    """What the agent saw at a step, compact enough to commit: the replay cache matches on it."""

    url: str
    title: str
    text: str = Field(description="Hash of the page's visible text and form values")
    image: str = Field(description="Perceptual hash (256-bit dHash, hex) of the screenshot")
    size: tuple[int, int] = Field(default=(0, 0), description="Screenshot size: a recording replays at the same one")


class PromptContext(_Record):
    """The model inputs of a step that its other fields do not hold.

    With the step's own fields (url, index, events, kind, element, action), the run's goal and the
    screenshot files, an export rebuilds the exact prompts sent (the prompt text is not stored).
    """

    max_steps: int
    notes: list[str] = Field(default_factory=list, description="Notes shown to the policy")
    recent: list[str] = Field(default_factory=list, description="Recent-action lines shown to the policy")
    feedback: str | None = Field(default=None, description="Validator feedback shown to the policy")
    progress: str | None = Field(
        default=None, description="What the policy was told of its last action changing nothing (see Step.unchanged)"
    )
    screenshots: int = Field(default=1, description="Screenshots in the policy request: those of the last N steps")
    epoch: int | None = Field(
        default=None,
        description="Append context: the step whose observation began the policy conversation this request "
        "continues (None: the window context)",
    )
    outcome: str | None = Field(default=None, description="Append context: the previous action's line shown")
    reply: str | None = Field(
        default=None, description="Append context: the policy's reply to this step, as appended to the conversation"
    )
    localizer_profile: str | None = None
    validator_url: str | None = Field(default=None, description="URL the validator was told")
    validator_screenshots: int = Field(default=0, description="Screenshots the validator saw: the last N steps'")
    secrets: list[str] = Field(default_factory=list, description="Names of the secrets the policy was told of")
    restrictions: str = Field(default="", description="Navigation rules the policy was told")
    uploads: list[str] = Field(default_factory=list, description="Files the policy was told it may upload")
    expect: str | None = Field(default=None, description="Expected final state the validator was told")


class Timings(_Record):
    observe_s: float = 0.0
    policy_s: float = 0.0
    localize_s: float = 0.0
    act_s: float = 0.0
    validate_s: float = 0.0
    total_s: float = 0.0

    @property
    def model_s(self) -> float:
        return self.policy_s + self.localize_s + self.validate_s


class Step(_Record):
    """One step of a run: what the agent saw, decided and did."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    index: int = Field(description="1-based step number")
    kind: Literal["action", "final"] = "action"
    url: str
    title: str = ""
    screenshot: str | None = Field(default=None, description="File name of the screenshot, once written")
    image_size: tuple[int, int] = (0, 0)
    events: list[str] = Field(default_factory=list, description="Dialogs, new tabs and other page events")
    recoveries: list[str] = Field(
        default_factory=list,
        description="What the browser session did to get past a browser that did not answer "
        "(a screenshot retaken, a page reopened)",
    )
    note: str = ""
    thought: str = ""
    action: Action | None = None
    element: str | None = None
    point: Point | None = None
    outcome: str = ""
    error: str | None = None
    verdict: Verdict | None = None
    calls: list[ModelCall] = Field(default_factory=list)
    context: PromptContext | None = None
    timings: Timings = Field(default_factory=Timings)
    replayed: bool | None = Field(
        default=None, description="With a replay cache: True if replayed without models, False if re-planned"
    )
    fingerprint: Fingerprint | None = None
    unchanged: bool = Field(
        default=False,
        description="The previous step's action was carried out and changed nothing visible: this step saw the "
        "same URL and the same screenshot (the policy was told)",
    )
    repeated: int = Field(
        default=0,
        description="Times in a row the previous step's action, the same each time, changed nothing (0 for a wait); "
        "from agent.repeat_warning_after on the policy was told to try something else",
    )
    image: SkipValidation[Screenshot | None] = Field(default=None, exclude=True, repr=False)
    """The screenshot itself (not serialised); the trajectory writer saves it as a file."""


class RunResult(_Record):
    """The outcome of a run, as written to ``result.json``."""

    success: bool = Field(
        description="True only when the validator accepted the answer (a task that rewards itself: when its page says so)"
    )
    reward: float | None = Field(
        default=None,
        description="A task that rewards itself (MiniWoB++): the reward its page gave (None: no such task)",
    )
    answer: str | None = None
    stop_reason: StopReason
    message: str = Field(default="", description="Why the run stopped, in words")
    url: str = Field(description="Start URL")
    final_url: str = ""
    goal: str
    steps: int = 0
    attempts: int = Field(default=0, description="Answers judged by the validator")
    feedback: list[str] = Field(default_factory=list, description="Validator feedback, in order")
    usage: Usage = Field(default_factory=Usage)
    duration_s: float = 0.0
    model_s: float = 0.0
    browser_s: float = 0.0
    output_dir: str | None = None
    started_at: str = ""
    replayed_steps: int = Field(default=0, description="Steps replayed from the cache without model calls")
    calls_saved: int = Field(default=0, description="Model calls the replayed steps did not need")
    trace: str | None = Field(default=None, description="Playwright trace file, when one was kept")


class CheckResult(_Record):
    """The validator's judgement of a statement about the current page (``Pilot.check``)."""

    holds: bool = Field(description="True when the validator judged that the statement holds on the page")
    feedback: str = Field(description="The validator's reason, addressed to whoever reads the check")
    run_dir: Path | None = Field(default=None, description="The check's run directory (report.html), if written")
    url: str = Field(default="", description="The URL of the page the statement was checked on")
    replayed: bool = Field(default=False, description="Answered from the replay cache, without a model call")
    usage: RoleUsage = Field(default_factory=RoleUsage, description="The validator call's usage (none if replayed)")
