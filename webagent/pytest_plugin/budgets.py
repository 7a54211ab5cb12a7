"""Budgets of the pytest plugin: model calls per test, and per session across xdist workers.

A test's budget is a plain ``Budget`` shared by its ``act``/``check``/``extract`` calls. The
session's budget must hold for the whole ``pytest -n 4`` run, not per worker: ``SharedBudget``
keeps its counts in a small JSON file in the run's temporary directory (the one xdist's workers
share), read and written under an exclusive ``flock`` at each reservation and charge, so the call
limit is exact across processes. Without ``fcntl`` (Windows) it counts in this process only.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

from ..budget import Budget, BudgetLimits
from ..files import write_atomic
from ..records import ModelCall

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["SharedBudget", "per_session_budget", "per_test_budget"]

log = structlog.get_logger("webagent.pytest")

_FIELDS = ("calls", "tokens", "usd", "in_flight")


class SharedBudget(Budget):
    """A ``Budget`` whose counts live in ``path``, shared by the processes that use the same file."""

    def __init__(
        self,
        limits: BudgetLimits,
        price: Callable[[ModelCall], float],
        path: Path,
        *,
        scope: str = "session",
        hint: str | None = None,
    ) -> None:
        super().__init__(limits, price, scope=scope, hint=hint)
        self.path = path
        self._lock_path = path.with_name(path.name + ".lock")
        self._held = False  # inside _shared() already (charge() calls release())

    @contextlib.contextmanager
    def _shared(self) -> Iterator[None]:
        """Load the shared counts, let the caller change them, store them: all under the file lock."""
        if fcntl is None or self._held:
            yield
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._held = True
            try:
                self._load()
                yield
                write_atomic(self.path, json.dumps({name: getattr(self, name) for name in _FIELDS}))
            finally:
                self._held = False
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:  # a torn file cannot happen (atomic writes); be safe anyway
            log.warning("shared_budget_unreadable", path=str(self.path), error=str(exc))
            return
        self.calls = int(data.get("calls", 0))
        self.tokens = int(data.get("tokens", 0))
        self.usd = float(data.get("usd", 0.0))
        self.in_flight = int(data.get("in_flight", 0))

    def check(self) -> None:
        with self._shared():
            super().check()

    def release(self, reserved: int = 1) -> None:
        with self._shared():
            super().release(reserved)

    def charge(self, call: ModelCall) -> None:
        with self._shared():
            super().charge(call)


def per_test_budget(calls: int | None, price: Callable[[ModelCall], float]) -> Budget | None:
    """The budget of one test (None when unlimited)."""
    if calls is None:
        return None
    return Budget(BudgetLimits(calls=calls), price, scope="test", hint="--webagent-max-calls-per-test")


def per_session_budget(calls: int | None, price: Callable[[ModelCall], float], shared_dir: Path) -> Budget | None:
    """The budget of the whole run, shared by its xdist workers through ``shared_dir`` (None when unlimited)."""
    if calls is None:
        return None
    return SharedBudget(
        BudgetLimits(calls=calls),
        price,
        shared_dir / "webagent-session-budget.json",
        scope="session",
        hint="--webagent-max-calls-per-session",
    )
