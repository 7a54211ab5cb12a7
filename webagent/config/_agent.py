"""The ``[agent]`` section: the loop's limits, its context for the policy, and budgets."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..families import Grounding
from ._base import Section

__all__ = ["MAX_ACTIONS_PER_TURN", "AgentSettings"]

#: The most actions one policy reply may carry (``max_actions_per_turn``).
MAX_ACTIONS_PER_TURN = 10


class AgentSettings(Section):
    max_steps: int = Field(
        default=30,
        gt=0,
        description="Steps in all: the last one asks for the final answer (a run has at most this many)",
    )
    max_attempts: int = Field(default=3, gt=0, description="Answers the validator may judge")
    max_time_s: float = Field(default=600.0, gt=0)
    ask_user_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="How long a run waits for a person to answer its ask_user (its clock paused meanwhile); then "
        "it ends with stop reason needs_human",
    )
    context: Literal["append", "window", "history"] | None = Field(
        default=None,
        description="The policy's context: append = one conversation that grows by a turn per step (earlier "
        "turns never change, so a server prefix cache reuses them), restarted every epoch_steps; window = each "
        "request rebuilt from the task, notes, recent actions and the last screenshots_in_context screenshots; "
        "history = H Company's agent-loop layout: one conversation for the run, at most history_screenshots "
        "screenshots, older ones replaced by a text placeholder. Unset: the policy family's default",
    )
    grounding: Grounding | None = Field(
        default=None,
        description="Who places a click, write or select on the screenshot: policy = the policy's own reply "
        "carries the point (one model request per step; families that ground their clicks); localizer = a "
        "separate localizer model (Surfer-H's three roles). Unset: the policy family's default",
    )
    max_actions_per_turn: int | None = Field(
        default=None,
        ge=1,
        le=MAX_ACTIONS_PER_TURN,
        description="Actions one policy reply may carry, carried out in order with one observation after them; the "
        "list stops at the first action that changes the URL or the page's structure (a navigation, a new tab, a "
        "dialog, elements added or removed), the rest reported as not carried out. In JSON an actions list, as "
        "native tool calls parallel calls. Unset: the policy family's default (1)",
    )
    history_screenshots: int = Field(
        default=3, ge=1, description="history: screenshots kept in the policy's conversation at most"
    )
    history_pruning: Literal["epoch", "step"] = Field(
        default="epoch",
        description="history: when older screenshots become placeholders: epoch = only once the conversation "
        "would hold more than history_screenshots, all but the current one at once (every request in between "
        "extends the last one, so a prefix cache reuses it); step = at every step, keeping the last "
        "history_screenshots (H Company's per-step pruning, which rewrites earlier turns each step)",
    )
    epoch_steps: int = Field(
        default=6,
        ge=1,
        description="append: steps (and so screenshots) per epoch; a new epoch restarts the conversation from "
        "the task, the notes, the recent actions and the current screenshot",
    )
    epoch_max_chars: int = Field(
        default=8000,
        ge=0,
        description="append: an epoch also ends once its text (turns and replies) reaches this many characters "
        "(0: no limit)",
    )
    screenshots_in_context: int = Field(default=3, ge=1, description="window: screenshots per policy request")
    recent_actions: int = Field(default=8, ge=0, description="Recent actions shown to the policy")
    notes_max_chars: int = Field(default=1200, ge=0, description="Budget for notes shown to the policy")
    validator_screenshots: int = Field(
        default=2, ge=1, description="Final screenshots shown to the validator (in a separate request)"
    )
    validator_context: Literal["conversation", "separate"] | None = Field(
        default=None,
        description="What the validator judges an answer in: conversation = the policy's own conversation, "
        "continued by one turn with the validator's instructions (its screenshots and text already in the "
        "server's prefix cache; the validator then also reads the policy's notes and replies; the validator "
        "must be the policy's model); separate = a request of its own with the task, the answer and the last "
        "validator_screenshots screenshots. Unset: the policy family's default (conversation for H Company's "
        "agent-loop families) when the validator is the policy's model at the policy's base_url, else separate",
    )
    repeat_warning_after: int = Field(
        default=3,
        ge=0,
        description="The policy is told to try something else once the same action has changed nothing visible "
        "this many times in a row (0: never; a single action that changed nothing is always told)",
    )
    replay_any_origin: bool = Field(
        default=False,
        description="Replay a replay cache's recordings from any origin: a recording is bound to the origin "
        "(scheme, host, port) of the start URL it was made from, and a look-alike page on another one replays "
        "nothing; true: the same suite against staging and production (--cache-any-origin)",
    )
    budget_calls: int | None = Field(default=None, ge=0, description="Hard limit on model calls per run")
    budget_tokens: int | None = Field(default=None, ge=0, description="Hard limit on tokens (all roles) per run")
    budget_usd: float | None = Field(default=None, ge=0, description="Hard limit on dollars per run")
