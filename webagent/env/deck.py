"""A server's default tasks: what an empty reset runs (``webagent env serve --tasks``).

OpenEnv clients and TRL's rollout loops reset without saying which task: the server then draws the
next one from its task set, a task set's name (``miniwob``: every MiniWoB++ task) or a task file
(``webagent.tasks.load_tasks``: benchmark lines ``{"id", "task", "seed"}`` and web tasks
``{"id", "url", "goal", "reference"}``). The draws are a fixed sequence of the server's seed
(``--seed``): every task once per pass, each pass in its own shuffled order, each draw with a page
seed of its own (a line's own seed wins). A reset that gives a seed and no task gets the task and
page of that seed, the same every time, whatever the server drew before.

A task file is data, not the operator's word: its web tasks' start URLs reach their own
``host:port`` only (``TaskSource`` ``"file"``), and a line with ``browser`` settings (a signed-in
state, a proxy, headers) is refused, since the environment runs none of them.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from ..errors import InputError
from ..tasks import TaskSpec, load_tasks, tasksets
from ..tasks.benchmarks import shown
from .inputs import TaskInput, TaskSource
from .rewards import RewardMode

__all__ = ["Draw", "TaskDeck"]

Draw = tuple[TaskInput, int, TaskSource]
"""A drawn task, its page seed, and who it comes from."""
_SEEDS = 2**31
#: What a refused line of a task file is told: the server has no --trust-tasks.
_DATA_HINT = "the environment server runs a task file as data (it has no --trust-tasks)"


class TaskDeck:
    """The default tasks of a server and the sequence they are drawn in (see the module docstring)."""

    def __init__(self, tasks: Sequence[str | TaskSpec], *, seed: int = 0, name: str = "the task set") -> None:
        if not tasks:
            raise InputError(f"{name} has no tasks")
        self.tasks = list(tasks)
        self.name = name
        self._rng = random.Random(seed)
        self._order: list[int] = []
        self.drawn = 0

    @classmethod
    def load(cls, given: str, *, seed: int = 0) -> TaskDeck:
        """The tasks ``given`` names: a task file's path, or a registered task set's name (``miniwob``)."""
        path = Path(given)
        if path.is_file():
            specs = load_tasks(path, hint=_DATA_HINT)
            for spec in specs:
                if spec.browser is not None:
                    raise InputError(
                        f"{path}: task {shown(spec.id)!r} has 'browser' settings, which the environment server "
                        "does not run; remove them"
                    )
            return cls(specs, seed=seed, name=str(path))
        sets = tasksets()
        if given in sets:
            return cls([f"{given}/{name}" for name in sets[given].names()], seed=seed, name=given)
        known = ", ".join(sorted(sets)) or "none"
        raise InputError(f"--tasks {shown(given)}: no such file, nor a task set (known: {known})")

    def check(self, reward: RewardMode) -> None:
        """InputError (one line) when a task cannot be rewarded in ``reward`` mode."""
        for task in self.tasks:
            if not isinstance(task, TaskSpec) or task.benchmark is not None:
                continue
            if reward == "task":
                raise InputError(
                    f"{self.name}: task {shown(task.id)!r} is a web task; --reward task serves benchmark tasks only "
                    "(--reward validator, reference or both)"
                )
            if reward in ("reference", "both") and not task.reference:
                raise InputError(
                    f"{self.name}: task {shown(task.id)!r} has no reference answer, which --reward {reward} needs"
                )

    def draw(self, seed: int | None = None) -> Draw:
        """The next task of the sequence with its page seed; with ``seed``, the task and page of that seed."""
        if seed is not None:
            task = self.tasks[random.Random(seed).randrange(len(self.tasks))]
            page = seed
        else:
            if not self._order:
                self._order = list(range(len(self.tasks)))
                self._rng.shuffle(self._order)
            task = self.tasks[self._order.pop(0)]
            page = self._rng.randrange(_SEEDS)
        self.drawn += 1
        if isinstance(task, TaskSpec) and task.benchmark is None:
            return task, page, "file"
        return task, page, "operator"
