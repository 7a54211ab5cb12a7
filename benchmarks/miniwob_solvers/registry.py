"""The solvers by task name, and the tasks left without one (with why)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .play import Play

__all__ = ["CLIPBOARD", "NOT_COVERED", "SOLVERS", "Solver", "solves"]

Solver = Callable[[Play], Awaitable[None]]

#: Task name -> its solver.
SOLVERS: dict[str, Solver] = {}
#: Task name -> why no scripted solution is given.
NOT_COVERED: dict[str, str] = {}
#: Tasks whose solvers copy and paste: every context of a browser shares its clipboard, so two of
#: them at once would paste each other's text; the benchmark runs them one at a time.
CLIPBOARD: set[str] = set()


def solves(*names: str, clipboard: bool = False) -> Callable[[Solver], Solver]:
    """Register a solver for the tasks ``names`` (variants of one page share theirs); ``clipboard``:
    it uses the browser's clipboard (``CLIPBOARD``)."""

    def register(solver: Solver) -> Solver:
        for name in names:
            if name in SOLVERS:
                raise ValueError(f"two solvers for {name}")
            SOLVERS[name] = solver
            if clipboard:
                CLIPBOARD.add(name)
        return solver

    return register
