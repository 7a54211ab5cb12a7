"""What a caller hands the environment: tasks and actions, turned into what the loop runs.

A task is a ``TaskSpec`` or a dict (``{"url", "goal", "reference"?}``), a benchmark task name
(``"miniwob/click-button"``, with a seed) or a ``BenchmarkTask``. An action is the policy's reply
(its text, its JSON as a dict, or a ``PolicyReply``), or a dict of one action; ``point`` places an
element action in screenshot pixels instead of asking the localizer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..actions import ClickElement, PolicyReply, SelectOption, WriteElement
from ..batch.tasks import TaskSpec
from ..errors import InputError, LocalizationError
from ..images import Frame
from ..model.parsing import ReplyParseError, parse_reply
from ..records import Point
from .tasks import BenchmarkTask, benchmark_task

__all__ = ["Action", "TaskInput", "as_task", "needs_point", "point_at", "raw_reply", "reply_of"]

Action = PolicyReply | Mapping[str, Any] | str
TaskInput = TaskSpec | BenchmarkTask | Mapping[str, Any] | str


def as_task(task: TaskInput, seed: int | None = None) -> TaskSpec | BenchmarkTask:
    """The task to run: a benchmark task (by name, or a mapping with ``task`` and ``seed``) or a web task."""
    if isinstance(task, BenchmarkTask | TaskSpec):
        return task
    if isinstance(task, str):
        return benchmark_task(task, seed)
    data = dict(task)
    if "task" in data:  # {"task": "miniwob/click-button", "seed": 3}
        given = data.get("seed", seed)
        if given is not None and not isinstance(given, int):
            raise InputError(f"a task's seed must be an integer (got {given!r})")
        return benchmark_task(str(data["task"]), given)
    try:
        data.setdefault("id", "task")
        refs = data.get("reference", [])
        data["reference"] = [refs] if isinstance(refs, str) else list(refs)
        return TaskSpec.model_validate(data)
    except (ValidationError, TypeError) as exc:
        raise InputError(
            f"a task needs 'url' and 'goal' (and optionally 'id', 'reference'), or 'task' naming a benchmark task: {exc}"
        ) from None


def reply_of(action: Action) -> PolicyReply:
    """The policy's reply from a PolicyReply, its JSON text, or a dict (a whole reply or just an action)."""
    if isinstance(action, PolicyReply):
        return action
    if isinstance(action, str):
        return parse_reply(action, PolicyReply)
    data = dict(action)
    if not isinstance(data.get("action"), Mapping):
        data = {"action": data}
    try:
        return PolicyReply.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ReplyParseError(f"the action is not valid: {where}: {first['msg']}") from None


def raw_reply(action: Action) -> str:
    """The reply as the policy's conversation keeps it (append context): its text, else its JSON."""
    if isinstance(action, str):
        return action
    if isinstance(action, PolicyReply):
        return action.model_dump_json()
    return json.dumps(dict(action), ensure_ascii=False, default=str)


def needs_point(reply: PolicyReply) -> bool:
    return isinstance(reply.action, ClickElement | WriteElement | SelectOption)


def point_at(frame: Frame, point: tuple[float, float]) -> Point:
    """A caller's point in screenshot pixels; a LocalizationError (a failed step) when off the image."""
    x, y = point
    if not frame.contains(x, y):
        raise LocalizationError(
            f"the point ({x:g}, {y:g}) is outside the {frame.image_width}x{frame.image_height} screenshot"
        )
    return Point(image=(x, y), viewport=frame.to_css(x, y))
