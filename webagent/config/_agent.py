"""The ``[agent]`` section: the loop's limits, its context for the policy, and budgets."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ._base import Section

__all__ = ["AgentSettings"]


class AgentSettings(Section):
    max_steps: int = Field(default=30, gt=0)
    max_attempts: int = Field(default=3, gt=0, description="Answers the validator may judge")
    max_time_s: float = Field(default=600.0, gt=0)
    ask_user_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="How long a run waits for a person to answer its ask_user (its clock paused meanwhile); then "
        "it ends with stop reason needs_human",
    )
    context: Literal["append", "window"] = Field(
        default="append",
        description="The policy's context: append = one conversation that grows by a turn per step (earlier "
        "turns never change, so a server prefix cache reuses them), restarted every epoch_steps; window = each "
        "request rebuilt from the task, notes, recent actions and the last screenshots_in_context screenshots",
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
    validator_screenshots: int = Field(default=2, ge=1, description="Final screenshots shown to the validator")
    repeat_warning_after: int = Field(
        default=3,
        ge=0,
        description="The policy is told to try something else once the same action has changed nothing visible "
        "this many times in a row (0: never; a single action that changed nothing is always told)",
    )
    budget_calls: int | None = Field(default=None, ge=0, description="Hard limit on model calls per run")
    budget_tokens: int | None = Field(default=None, ge=0, description="Hard limit on tokens (all roles) per run")
    budget_usd: float | None = Field(default=None, ge=0, description="Hard limit on dollars per run")
