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
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from ..actions import PolicyReply, Scroll, points_of
from ..errors import ConfigError, InputError, LocalizationError
from ..images import Frame
from ..loop import Placed
from ..model.client import Reply
from ..records import Point, ToolCall
from ..roles.contract import Contract, Decision
from ..runtime.access import client_start, data_start, task_set_policy
from ..safety import NavigationPolicy
from ..tasks import BenchmarkTask, TaskSpec, benchmark_task
from ..tasks.benchmarks import shown
from ..urls import normalize_url

if TYPE_CHECKING:
    from ..runtime import Runtime

__all__ = [
    "SERVER_NAME",
    "Action",
    "TaskInput",
    "TaskSource",
    "as_task",
    "check_seed",
    "needs_point",
    "places_of",
    "point_at",
    "read_policy",
    "start_policy",
]

Action = PolicyReply | Mapping[str, Any] | str
"""What ``WebEnv.step`` takes: a PolicyReply; the reply's text; its JSON as a dict (webagent's shape
or H's ``{"note", "thought", "tool_call"}``); or a native tool call."""
TaskInput = TaskSpec | BenchmarkTask | Mapping[str, Any] | str
TaskSource = Literal["operator", "client", "file"]
"""Who a task comes from: the operator (the library's caller), a remote client of a server of ours,
or a task file the operator did not mark trusted (``webagent.env.core``'s docstring)."""
#: How a client of the environment server is told which server refused its start URL.
SERVER_NAME = "the environment server"


#: The keys of a task given as a mapping: a web task's, a benchmark task's.
WEB_KEYS = frozenset({"id", "url", "goal", "reference"})
BENCHMARK_KEYS = frozenset({"id", "task", "seed"})
MAX_URL = 8192
MAX_ID = 200


def as_task(task: TaskInput, seed: int | None = None) -> TaskSpec | BenchmarkTask:
    """The task to run: a benchmark task (by name, a mapping with ``task`` and ``seed``, or a task
    file's benchmark line) or a web task. InputError (one line) for anything else."""
    check_seed(seed)
    if isinstance(task, BenchmarkTask):
        return task
    if isinstance(task, TaskSpec):  # a task file's line: a benchmark one names its task
        return (
            task
            if task.benchmark is None
            else benchmark_task(task.benchmark, task.seed if task.seed is not None else seed)
        )
    if isinstance(task, str):
        return benchmark_task(task, seed)
    if not isinstance(task, Mapping):
        raise InputError(f"a task is a benchmark task's name or an object, not {type(task).__name__}")
    data = dict(task)
    keys = BENCHMARK_KEYS if "task" in data else WEB_KEYS
    unknown = sorted(str(k) for k in data if k not in keys)
    if unknown:
        raise InputError(f"a task takes {', '.join(sorted(keys))}; unknown: {shown(', '.join(unknown))}")
    if "task" in data:  # {"task": "miniwob/click-button", "seed": 3}
        given = data.get("seed", seed)
        check_seed(given)
        if not isinstance(data["task"], str):
            raise InputError("a task's 'task' names a benchmark task, e.g. \"miniwob/click-button\"")
        return benchmark_task(data["task"], given)
    if len(str(data.get("url", ""))) > MAX_URL or len(str(data.get("id", ""))) > MAX_ID:
        raise InputError(f"a task's url has at most {MAX_URL} characters and its id at most {MAX_ID}")
    missing = [k for k in ("url", "goal") if k not in data]
    if missing:
        raise InputError(
            f"a task needs {' and '.join(missing)} ({{'url', 'goal', 'reference'?}}), or 'task' naming a benchmark task"
        )
    try:
        data.setdefault("id", "task")
        refs = data.get("reference", [])
        data["reference"] = [refs] if isinstance(refs, str) else list(refs)
        return TaskSpec.model_validate(data)
    except (ValidationError, TypeError) as exc:
        where = ".".join(str(p) for p in exc.errors()[0]["loc"]) if isinstance(exc, ValidationError) else "reference"
        raise InputError(f"a task's {where} is not valid: url and goal are strings, reference a list of them") from None


def check_seed(seed: object) -> None:
    """InputError unless ``seed`` is None or an integer (not a bool) in [0, 2**63)."""
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63):
        raise InputError(f"a seed is an integer from 0 to 2**63 - 1 (got {shown(repr(seed))})")


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


def places_of(
    decision: Decision,
    frame: Frame,
    point: tuple[float, float] | None,
    to_point: tuple[float, float] | None,
    grounded: bool,
    has_localizer: bool,
) -> list[Placed]:
    """Where each action of the reply acts (``frame``: the observation's screenshot): the caller's
    points for the first, else the reply's own (grounded), else the localizer's (asked during the
    step); a ConfigError when an action needs a point and no localizer is configured (a grounded
    scroll without one turns the wheel at the page's centre)."""
    places: list[Placed] = []
    for i, (action, spot) in enumerate(zip(decision.reply.actions, decision.spots, strict=True)):
        wanted = points_of(action)
        given = (point, to_point) if i == 0 and point is not None else (spot.point, spot.target)
        if wanted == 0 and not (isinstance(action, Scroll) and given[0] is not None):
            places.append(Placed())
            continue
        missing = given[0] is None or (wanted == 2 and given[1] is None)
        if missing and not grounded and not has_localizer:
            needs = "point=(x, y) and to_point=(x, y)" if wanted == 2 else "point=(x, y)"
            raise ConfigError(f"no localizer model is configured: pass {needs} to step() or configure [localizer]")
        places.append(
            Placed(
                point_at(frame, given[0]) if given[0] is not None else None,
                point_at(frame, given[1]) if given[1] is not None and wanted == 2 else None,
            )
        )
    return places


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


async def start_policy(
    runtime: Runtime, spec: TaskSpec | BenchmarkTask, source: TaskSource
) -> tuple[str, NavigationPolicy | None]:
    """The start URL of an episode of ``spec`` from ``source`` and its navigation policy (None: the
    runtime's, with the operator's trust); InputError or NavigationError for a start refused."""
    if isinstance(spec, BenchmarkTask):  # its task set's own server, whoever asked
        url = normalize_url(spec.url)
        return url, task_set_policy(runtime, url)
    if source == "client":
        return await client_start(runtime, spec.url, server=SERVER_NAME)
    url = normalize_url(spec.url)
    return url, (data_start(runtime, url) if source == "file" else None)
