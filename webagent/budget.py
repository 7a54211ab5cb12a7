"""Hard limits on model calls, tokens and dollars, for one run or shared by a whole suite.

A ``Budget`` is checked before every model call, which reserves the call, and charged after it:
a call is never sent once the calls made and in flight reach the limit, so the call limit is exact
even for a suite budget shared by concurrent runs. Tokens and dollars are known only after a
call, so runs stop at the first call that reaches them (calls already in flight still finish).
The loop turns ``BudgetExceeded`` into stop reason ``budget``.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from .errors import BudgetExceeded
from .records import ModelCall

__all__ = ["Budget", "BudgetLimits"]


class BudgetLimits(BaseModel):
    """Limits; None means unlimited."""

    model_config = ConfigDict(extra="forbid")

    calls: int | None = Field(default=None, ge=0, description="Model calls (one per policy/localizer/validator call)")
    tokens: int | None = Field(default=None, ge=0, description="Prompt + completion tokens, all roles")
    usd: float | None = Field(default=None, ge=0, description="Dollars at the per-role prices in the config")

    @property
    def active(self) -> bool:
        return self.calls is not None or self.tokens is not None or self.usd is not None


class Budget:
    """Counts what was spent against ``limits``; ``scope`` names it in messages ("run", "suite")."""

    def __init__(
        self,
        limits: BudgetLimits,
        price: Callable[[ModelCall], float],
        *,
        scope: str = "run",
        hint: str | None = None,
    ) -> None:
        """``hint``: the setting that raises the limit, named in the message (default: the config's
        ``[agent] budget_*`` for a run, the suite's ``budget.*`` otherwise)."""
        self.limits = limits
        self.price = price
        self.scope = scope
        self.hint = hint
        self.calls = 0
        self.tokens = 0
        self.usd = 0.0
        self.in_flight = 0

    def check(self) -> None:
        """Reserve one call, or raise BudgetExceeded if any limit is reached (no further call may be sent)."""
        limits = self.limits
        if limits.calls is not None and self.calls + self.in_flight >= limits.calls:
            self._exceeded(f"{limits.calls} model calls", f"{self.calls} made, {self.in_flight} in flight", "calls")
        if limits.tokens is not None and self.tokens >= limits.tokens:
            self._exceeded(f"{limits.tokens} tokens", f"{self.tokens} used", "tokens")
        if limits.usd is not None and self.usd >= limits.usd:
            self._exceeded(f"${limits.usd:g}", f"${self.usd:.4f} spent", "usd")
        self.in_flight += 1

    def release(self, reserved: int = 1) -> None:
        """Give back reservations whose calls were never made (or never recorded)."""
        self.in_flight = max(0, self.in_flight - reserved)

    def charge(self, call: ModelCall) -> None:
        """Count a call made (and drop its reservation)."""
        self.release()
        self.calls += 1
        self.tokens += call.usage.prompt_tokens + call.usage.completion_tokens
        self.usd += self.price(call)

    def _exceeded(self, limit: str, spent: str, key: str) -> None:
        where = self.hint or ("[agent] budget_" + key if self.scope == "run" else f"the suite's budget.{key}")
        raise BudgetExceeded(f"the {self.scope}'s budget of {limit} is spent ({spent}); raise {where} to allow more")
