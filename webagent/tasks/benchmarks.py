"""Benchmark tasks that reward themselves, and the registry of task sets (the extension point).

A task is named ``<set>/<name>`` (``miniwob/click-button``) and started with a seed. Its page
says when the episode is over and what it earned: ``BenchmarkTask.start`` runs once the start
page is open (the seed, the task's own start; it returns the goal the page shows) and
``BenchmarkTask.check`` after every step (``webagent.loop.task``). The environment, the gymnasium,
verifiers and OpenEnv adapters and ``webagent batch`` (task lines ``{"id", "task", "seed"}``) all
take tasks by that name.

A BrowserGym-style task set (WebArena, WorkArena, your own) is a ``TaskSet`` registered under its
prefix, in code or through the ``webagent.tasksets`` entry point group::

    class ShopTask(BenchmarkTask):
        async def start(self, page):          # log in, reset the site's state, return the intent
            ...
        async def check(self, page):          # the task's own evaluator: the page, or the site's API
            ...

    class ShopTasks(TaskSet):
        name = "shop"
        def names(self): return ["checkout", "refund"]
        def task(self, name, seed): return ShopTask(f"shop/{name}", url=..., goal="...", seed=seed)

    register_taskset(ShopTasks())
"""

from __future__ import annotations

import abc
import importlib.metadata
from collections.abc import Callable

import structlog

from ..errors import InputError
from ..loop import PageDriver, TaskCheck

__all__ = [
    "ENTRY_POINT_GROUP",
    "BenchmarkTask",
    "TaskSet",
    "benchmark_task",
    "is_benchmark_name",
    "register_taskset",
    "shown",
    "tasksets",
]

log = structlog.get_logger("webagent.tasks")

#: Packages add task sets here: ``[project.entry-points."webagent.tasksets"] shop = "pkg.mod:ShopTasks"``.
ENTRY_POINT_GROUP = "webagent.tasksets"


class BenchmarkTask(abc.ABC):
    """One seeded task whose page judges itself (a ``webagent.loop.TaskHook``)."""

    def __init__(self, id: str, *, url: str, goal: str, seed: int | None = None) -> None:
        self.id = id
        self.url = url
        #: What the task asks; ``start`` may replace it with the goal the page shows.
        self.goal = goal
        self.seed = seed

    @abc.abstractmethod
    async def start(self, page: PageDriver) -> str | None:
        """Start the task on its open start page; the goal it shows (None: keep ``goal``)."""

    @abc.abstractmethod
    async def check(self, page: PageDriver) -> TaskCheck:
        """The task's state after a step, read from the page (a BrowserError when it cannot be read)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id!r}, seed={self.seed!r})"


class TaskSet(abc.ABC):
    """A family of benchmark tasks under one prefix (``miniwob``)."""

    name: str

    @abc.abstractmethod
    def names(self) -> list[str]:
        """The task names of the set (without the prefix)."""

    @abc.abstractmethod
    def task(self, name: str, seed: int | None) -> BenchmarkTask:
        """Task ``name`` with ``seed`` (None: the set's default); an InputError names an unknown one."""


_SETS: dict[str, TaskSet | Callable[[], TaskSet]] = {}
_entry_points_loaded = False


def register_taskset(taskset: TaskSet | Callable[[], TaskSet], name: str | None = None) -> None:
    """Make a task set's tasks available as ``<name>/<task>`` (a factory is called at first use)."""
    key = name or getattr(taskset, "name", None)
    if not key or "/" in key:
        raise ValueError("a task set needs a name without '/' (pass name=)")
    _SETS[key] = taskset


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if point.name in _SETS:
            continue
        try:
            _SETS[point.name] = point.load()
        except Exception as exc:  # a broken plugin must not break the other task sets
            log.warning("taskset_entry_point_failed", name=point.name, error=str(exc))


def _taskset(name: str) -> TaskSet:
    _load_entry_points()
    found = _SETS.get(name)
    if found is None:
        known = ", ".join(sorted(_SETS)) or "none"
        raise InputError(f"no task set named {shown(name)!r} (known: {known}); register one with register_taskset")
    if not isinstance(found, TaskSet):
        found = _SETS[name] = found()
    return found


def tasksets() -> dict[str, TaskSet]:
    """The registered task sets by prefix."""
    _load_entry_points()
    return {name: _taskset(name) for name in sorted(_SETS)}


def is_benchmark_name(text: str) -> bool:
    """Whether ``text`` looks like a task name (``set/name``) rather than a URL."""
    head, sep, tail = text.partition("/")
    return bool(sep and head and tail) and ":" not in head and "." not in head


def shown(text: str, limit: int = 80) -> str:
    """``text`` cut for a one-line message (a client's input may be megabytes)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def benchmark_task(name: str, seed: int | None = None) -> BenchmarkTask:
    """The task ``<set>/<name>`` with ``seed``, e.g. ``benchmark_task("miniwob/click-button", 3)``."""
    head, sep, tail = name.partition("/")
    if not sep or not head or not tail:
        raise InputError(f"a benchmark task is named '<set>/<task>', e.g. 'miniwob/click-button' (got {shown(name)!r})")
    return _taskset(head).task(tail, seed)
