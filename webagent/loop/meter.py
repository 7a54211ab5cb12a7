"""What a run spends: its model calls, tokens and time, charged to its budgets as they happen."""

from __future__ import annotations

from collections.abc import Sequence

from ..budget import Budget
from ..errors import BudgetExceeded
from ..records import ModelCall, Step, Usage

__all__ = ["Meter"]


class Meter:
    """The run's usage and its budgets.

    A model call is reserved in every budget before it is sent (``reserve``), so that runs sharing
    a budget cannot all pass the check and overspend together; the reservation becomes a charge
    when the call's record comes back (``charge``) and is given back at the step's end otherwise.
    """

    def __init__(self, budgets: Sequence[Budget] = ()) -> None:
        self.budgets = list(budgets)
        self.usage = Usage()
        self.model_s = 0.0
        self.browser_s = 0.0
        self._reserved = 0

    def reserve(self) -> None:
        """Reserve a model call in every budget; BudgetExceeded if one does not allow it."""
        checked: list[Budget] = []
        try:
            for budget in self.budgets:
                budget.check()
                checked.append(budget)
        except BudgetExceeded:
            for budget in checked:
                budget.release()
            raise
        if self.budgets:
            self._reserved += 1

    def charge(self, step: Step, call: ModelCall) -> None:
        """Record a model call in the step and charge it to every budget."""
        step.calls.append(call)
        self._reserved = max(0, self._reserved - 1)
        for budget in self.budgets:
            budget.charge(call)

    def charge_failed(self, step: Step, exc: Exception) -> None:
        """Charge the call record a failed model call carries (``exc.call``), once."""
        call = getattr(exc, "call", None)
        if isinstance(call, ModelCall) and all(c is not call for c in step.calls):
            self.charge(step, call)

    def account(self, step: Step) -> None:
        """At a step's end: give back unused reservations, add its calls and timings to the usage."""
        if self._reserved:
            for budget in self.budgets:
                budget.release(self._reserved)
            self._reserved = 0
        t = step.timings
        if not t.total_s:
            t.total_s = t.observe_s + t.policy_s + t.localize_s + t.act_s + t.validate_s
        for call in step.calls:
            self.usage.add_call(call)
        self.model_s += t.model_s
        self.browser_s += t.observe_s + t.act_s
