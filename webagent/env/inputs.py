"""What a caller hands the environment: tasks and actions, turned into what the loop runs.

A task is a ``TaskSpec`` or a dict (``{"url", "goal", "reference"?}``), a benchmark task name
(``"miniwob/click-button"``, with a seed) or a ``BenchmarkTask``. An action is the policy's reply
(its text, its JSON as a dict in any family's shape, a native tool call, or a ``PolicyReply``), or a
dict of one action; a grounded reply's point places its click; ``point`` places an
element action (or a scroll over a panel) in screenshot pixels instead of asking the localizer, and
``to_point`` a drag's release point.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from ..actions import PolicyReply, points_of
from ..batch.tasks import TaskSpec
from ..errors import InputError, LocalizationError
from ..images import Frame
from ..model.client import Reply
from ..records import Point, ToolCall
from ..roles.contract import Contract, Decision
from .tasks import BenchmarkTask, benchmark_task

__all__ = ["Action", "TaskInput", "as_task", "needs_point", "point_at", "read_policy"]

Action = PolicyReply | Mapping[str, Any] | str
"""What ``WebEnv.step`` takes: a PolicyReply; the reply's text; its JSON as a dict (webagent's shape
or H's ``{"note", "thought", "tool_call"}``); or a native tool call."""
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


def read_policy(action: Action, contract: Contract, frame: Frame) -> tuple[Decision, str | None, tuple[ToolCall, ...]]:
    """The decision in ``action`` (its point, when it carries one, in pixels of ``frame``), with the
    reply text and tool calls the policy's conversation keeps. Raises ReplyParseError.

    ``action``: a PolicyReply; the reply's text; its JSON as a dict, in webagent's shape (a whole
    reply or just an action) or H's (``{"note", "thought", "tool_call": {...}}``); or a native tool
    call (``{"name", "arguments"}``, or OpenAI's ``{"id", "type", "function": {...}}``)."""
    if isinstance(action, PolicyReply):
        return Decision(action), action.model_dump_json(), ()
    if isinstance(action, str):
        return contract.parse(Reply(action), frame), action, ()
    data = dict(action)
    call = _tool_call(data)
    if call is not None:
        tools = replace(contract, output="tools")
        return tools.parse(Reply("", (call,)), frame), "", (call,)
    raw = json.dumps(data, ensure_ascii=False, default=str)
    if not isinstance(data.get("action"), Mapping) and not isinstance(data.get("tool_call"), Mapping):
        data = {"action": data}  # just an action
    return contract.read(data, frame), raw, ()


def _tool_call(data: Mapping[str, Any]) -> ToolCall | None:
    nested = data.get("function")
    function: Mapping[str, Any] = nested if isinstance(nested, Mapping) else data
    if not isinstance(function.get("name"), str) or "arguments" not in function:
        return None
    arguments = function["arguments"]
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False, default=str)
    return ToolCall(id=str(data.get("id") or "call_0"), name=function["name"], arguments=text)


def needs_point(reply: PolicyReply) -> int:
    """How many points the reply's (first) action is placed at: 0, 1, or 2 for a drag (its element and
    its target)."""
    return points_of(reply.action)


def point_at(frame: Frame, point: tuple[float, float]) -> Point:
    """A caller's point in screenshot pixels; a LocalizationError (a failed step) when off the image."""
    x, y = point
    if not frame.contains(x, y):
        raise LocalizationError(
            f"the point ({x:g}, {y:g}) is outside the {frame.image_width}x{frame.image_height} screenshot"
        )
    return Point(image=(x, y), viewport=frame.to_css(x, y))
