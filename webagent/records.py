"""Typed records the loop yields and the CLI, the trajectory writer and the tests consume."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from .actions import Action
from .families.contracts import Grounding
from .images import Screenshot

__all__ = [
    "ROLES",
    "Acted",
    "CheckResult",
    "DownloadedFile",
    "Fingerprint",
    "ModelCall",
    "Phase",
    "PhaseName",
    "Point",
    "PolicyState",
    "PromptContext",
    "Role",
    "RoleUsage",
    "RunResult",
    "Step",
    "StopReason",
    "Tab",
    "Timings",
    "TokenRecord",
    "ToolCall",
    "Usage",
    "Verdict",
]

StopReason = Literal["answered", "max_steps", "max_time", "budget", "error", "needs_human"]
PhaseName = Literal["launch", "open", "step"]
Role = Literal["policy", "localizer", "validator"]
"""The roles a model plays in a run: the one place their names are spelled out (a test checks it)."""
#: Every role, in the order the config, the usage tables and the CLI list them.
ROLES: tuple[Role, ...] = get_args(Role)


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


class ToolCall(_Record):
    """One native tool call of a reply (OpenAI's ``tool_calls``), as the model gave it."""

    id: str
    name: str
    arguments: str = Field(description="The arguments' JSON text, exactly as returned")

    def message_part(self) -> dict[str, object]:
        """The call as an assistant message carries it back to the server."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class TokenRecord(_Record):
    """The tokens of one request and its reply, as the server gave them (vLLM's ``return_token_ids``
    and ``logprobs``; asked for with a role's ``return_tokens``): what an RL trainer trains on
    without tokenizing the chat again. A list is empty when the server did not give it."""

    prompt_token_ids: list[int] = Field(
        default_factory=list, description="The prompt as the model read it (chat template and image tokens included)"
    )
    token_ids: list[int] = Field(default_factory=list, description="The completion's tokens, as sampled")
    logprobs: list[float] = Field(
        default_factory=list, description="The log-probability of each completion token, in order"
    )


class ModelCall(_Record):
    """One logical model call (retries and a repair included)."""

    role: Role
    model: str
    raw: list[str] = Field(default_factory=list, description="Raw reply texts, the repaired one last")
    tool_calls: list[ToolCall] = Field(
        default_factory=list, description="The native tool calls of the last reply (policy in the tools output)"
    )
    usage: RoleUsage = Field(default_factory=RoleUsage)
    error: str | None = None
    tokens: list[TokenRecord] | None = Field(
        default=None,
        description="With the role's return_tokens: the tokens of each request, one per reply in raw (the repair's "
        "last); None otherwise",
    )


class Point(_Record):
    """A click point in both spaces."""

    image: tuple[float, float] = Field(description="Pixels of the screenshot sent to the model that placed it")
    viewport: tuple[float, float] = Field(description="CSS pixels of the viewport")


class Tab(_Record):
    """One open tab of the session (listed to the policy when there are several)."""

    index: int = Field(description="Its index among the open tabs (switch_tab, close_tab)")
    title: str = ""
    url: str = ""
    current: bool = Field(default=False, description="The tab the agent drives")


class DownloadedFile(_Record):
    """A file a page downloaded, kept in the run's ``downloads/`` folder (``[browser] downloads``)."""

    name: str = Field(description="Its file name in the downloads folder: the page's name for it, made safe")
    path: str = Field(description="Where it was saved")
    bytes: int = Field(description="Its size in bytes")
    url: str = Field(description="Where it was downloaded from (redacted like every page string)")


class Acted(_Record):
    """One action of a step whose reply carried several (``max_actions_per_turn`` above 1)."""

    action: Action
    element: str | None = None
    point: Point | None = None
    target_point: Point | None = Field(default=None, description="A drag's release point (its target's)")
    outcome: str = Field(
        default="", description="What it did; 'not carried out: ...' for those the list stopped before"
    )
    error: str | None = None


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


class PolicyState(_Record):
    """What the policy is told at one step, besides its screenshots: the one record a prompt
    strategy (``webagent.roles.prompting``) renders, kept on the step so that an export renders the
    same prompt again."""

    goal: str
    url: str
    step: int
    max_steps: int
    notes: list[str] = Field(default_factory=list, description="Notes shown to the policy")
    recent: list[str] = Field(default_factory=list, description="Recent-action lines shown to the policy")
    events: list[str] = Field(default_factory=list, description="Page events since the last step")
    feedback: str | None = Field(default=None, description="Standing validator feedback on the last answer")
    final: bool = Field(default=False, description="Only an answer is asked for (out of steps or time)")
    progress: str | None = Field(
        default=None, description="What the policy was told of its last action changing nothing (see Step.unchanged)"
    )
    outcome: str | None = Field(default=None, description="The previous step's action and outcome, as one line")
    outcomes: list[str] = Field(
        default_factory=list,
        description="The previous step's actions and outcomes, one line each, when it carried out several (the "
        "results of its parallel tool calls)",
    )
    tabs: list[Tab] = Field(default_factory=list, description="The open tabs, when there are several")
    secrets: list[str] = Field(default_factory=list, description="Names of the secrets the policy was told of")
    restrictions: str = Field(default="", description="Navigation rules the policy was told")
    uploads: list[str] = Field(default_factory=list, description="Files the policy was told it may upload")


class PromptContext(_Record):
    """The model inputs of a step that its other fields do not hold.

    With the screenshot files, an export rebuilds the exact prompts sent (the prompt text is not
    stored): the policy's from ``policy`` and the strategy fields, fed through the same strategy.
    """

    policy: PolicyState | None = Field(default=None, description="What the policy was told at this step")
    mode: Literal["append", "window", "history"] | None = Field(
        default=None, description="The policy's context mode (webagent.roles.prompting)"
    )
    epoch: int | None = Field(
        default=None,
        description="append: the step whose observation began the conversation this request continues; "
        "history: the step of its last rewrite of older screenshots to placeholders (None: the window context)",
    )
    screenshots: int = Field(default=1, description="Screenshots in the policy request")
    kept: int | None = Field(default=None, description="window: screenshots_in_context; history: history_screenshots")
    pruning: Literal["epoch", "step"] | None = Field(default=None, description="history: history_pruning")
    reply: str | None = Field(
        default=None, description="The policy's reply to this step, as appended to the conversation"
    )
    tool_calls: list[ToolCall] | None = Field(
        default=None, description="The native tool calls of that reply, as appended (tools output)"
    )
    family: str | None = Field(
        default=None, description="The policy family whose contract the request spoke (None: webagent's generic one)"
    )
    output: Literal["json", "tools"] | None = Field(default=None, description="How the policy was asked to reply")
    actions: int | None = Field(
        default=None, description="How many actions one reply could carry (max_actions_per_turn; None: one)"
    )
    grounding: Grounding | None = Field(
        default=None, description="Who placed the step's click: the policy in its reply, or the localizer"
    )
    localizer_profile: str | None = None
    validator_url: str | None = Field(default=None, description="URL the validator was told")
    validator_screenshots: int = Field(
        default=0, description="Screenshots the validator saw: the last N steps' (in the policy's conversation: its)"
    )
    validator_context: Literal["conversation", "separate"] | None = Field(
        default=None,
        description="What the validator judged the answer in: the policy's conversation (this step's request "
        "and reply, then its turn) or a separate request",
    )
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
    action: Action | None = Field(default=None, description="The action (the first, when the reply carried several)")
    element: str | None = None
    point: Point | None = None
    target_point: Point | None = Field(default=None, description="A drag's release point (its target's)")
    actions: list[Acted] = Field(
        default_factory=list,
        description="Every action of the reply in order, when it carried several (max_actions_per_turn above 1): "
        "what each did, or that it was not carried out; action, element, point and target_point are the first's, "
        "outcome says what they did together",
    )
    grounding: Grounding | None = Field(
        default=None, description="Who placed this step's click: the policy in its reply, or the localizer"
    )
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


class Phase(_Record):
    """What a run is doing before its first step is done (``RunStream.events()`` yields one as each
    begins): seconds with nothing else to show, minutes on a loaded machine. The CLI prints them."""

    name: PhaseName = Field(
        description="launch: the browser is being launched; open: the start URL is being opened; "
        "step: step 1 has begun (a screenshot, then the policy's model call)"
    )
    url: str = Field(description="The run's start URL")


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
    infrastructure: bool = Field(
        default=False,
        description="Stopped by an error of the machinery under the run, not of the task (a browser that did "
        "not answer in time, a model server that kept failing: WebAgentError.infrastructure); never a verdict",
    )
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
    grounding: Grounding | None = Field(
        default=None,
        description="Who placed the run's clicks: policy = the policy's own replies (one request per click "
        "step), localizer = a separate localizer model",
    )
    downloads: list[DownloadedFile] = Field(
        default_factory=list, description="The files the pages downloaded and the run kept, in the order they ended"
    )


class CheckResult(_Record):
    """The validator's judgement of a statement about the current page (``Pilot.check``)."""

    holds: bool = Field(description="True when the validator judged that the statement holds on the page")
    feedback: str = Field(description="The validator's reason, addressed to whoever reads the check")
    run_dir: Path | None = Field(default=None, description="The check's run directory (report.html), if written")
    url: str = Field(default="", description="The URL of the page the statement was checked on")
    replayed: bool = Field(default=False, description="Answered from the replay cache, without a model call")
    usage: RoleUsage = Field(default_factory=RoleUsage, description="The validator call's usage (none if replayed)")
