"""What a caller hands the environment: tasks and actions, turned into what the loop runs.

A task is a ``TaskSpec`` or a dict (``{"url", "goal", "reference"?}``, or ``{"task", "seed"?}``, each
with a task-file line's options and ``browser`` block: ``task_of``), a benchmark task name
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
from ..guard.navigation import NavigationPolicy
from ..guard.urls import normalize_url
from ..images import Frame
from ..loop import Placed
from ..model.client import Reply
from ..records import Point, ToolCall
from ..roles.contract import Contract, Decision
from ..runtime.access import client_start, data_start, task_set_policy
from ..tasks import BenchmarkTask, TaskSpec, benchmark_task, distrust
from ..tasks.benchmarks import shown
from ..tasks.spec import OPTION_KEYS
from ..tasks.taskfiles import browser_settings, task_options

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
    "task_of",
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


#: What a task given as a mapping may hold beside its start: the options of a task-file line (its
#: ``expect``, limits, budgets, trace) and its ``browser`` session settings, as ``TaskSpec`` has them.
OPTIONS = frozenset({*OPTION_KEYS, "browser"})
#: The keys of a task given as a mapping: a web task's, a benchmark task's.
WEB_KEYS = frozenset({"id", "url", "goal", "reference"}) | OPTIONS
BENCHMARK_KEYS = frozenset({"id", "task", "seed"}) | OPTIONS
MAX_URL = 8192
MAX_ID = 200
#: What a refusal of a client's task tells it.
CLIENT_HINT = "only the operator's own tasks may"


def as_task(task: TaskInput, seed: int | None = None, source: TaskSource = "operator") -> TaskSpec | BenchmarkTask:
    """The task to run: a benchmark task (by name, a mapping with ``task`` and ``seed``, or a task
    file's benchmark line) or a web task. InputError (one line) for anything else."""
    check_seed(seed)
    if isinstance(task, BenchmarkTask):
        return task
    if isinstance(task, Mapping):
        task = task_of(task, seed, source)
    if isinstance(task, TaskSpec):  # a task file's line: a benchmark one names its task
        return (
            task
            if task.benchmark is None
            else benchmark_task(task.benchmark, task.seed if task.seed is not None else seed)
        )
    if isinstance(task, str):
        return benchmark_task(task, seed)
    raise InputError(f"a task is a benchmark task's name or an object, not {type(task).__name__}")


def task_of(task: Mapping[str, Any], seed: int | None, source: TaskSource) -> TaskSpec:
    """A task given as a mapping, as the ``TaskSpec`` it spells: a web task ``{"url", "goal",
    "reference"?}`` or a benchmark task ``{"task", "seed"?}``, either with the options of a task-file
    line (``expect``, ``max_steps``, budgets, ...) and a ``browser`` block. A client's (``source``)
    may not set what a file not trusted may not (``tasks.distrust``: a signed-in ``storage_state``, a
    proxy, a secret's ``{{NAME}}``, ...). InputError (one line) naming what is wrong."""
    data = dict(task)
    keys = BENCHMARK_KEYS if "task" in data else WEB_KEYS
    unknown = sorted(str(k) for k in data if k not in keys)
    if unknown:
        raise InputError(f"a task takes {', '.join(sorted(keys))}; unknown: {shown(', '.join(unknown))}")
    if source != "operator":  # its start URL is checked as a client's (``start_policy``), with its own words
        refusal = distrust({k: v for k, v in data.items() if k != "url"}, CLIENT_HINT, who="from a client")
        if refusal is not None:
            raise InputError(f"a task's {refusal}")
    options = task_options(data, "a task")
    browser = browser_settings(data.get("browser"), "a task")
    if "task" in data:  # {"task": "miniwob/click-button", "seed": 3}
        given = data.get("seed", seed)
        check_seed(given)
        if not isinstance(data["task"], str):
            raise InputError("a task's 'task' names a benchmark task, e.g. \"miniwob/click-button\"")
        found = benchmark_task(data["task"], given)
        fields: dict[str, Any] = {"id": data.get("id", found.id), "url": found.id, "goal": found.goal}
        fields |= {"benchmark": data["task"], "seed": found.seed}
    else:
        if len(str(data.get("url", ""))) > MAX_URL or len(str(data.get("id", ""))) > MAX_ID:
            raise InputError(f"a task's url has at most {MAX_URL} characters and its id at most {MAX_ID}")
        missing = [k for k in ("url", "goal") if k not in data]
        if missing:
            raise InputError(
                f"a task needs {' and '.join(missing)} ({{'url', 'goal', 'reference'?}}), or 'task' naming a benchmark task"
            )
        refs = data.get("reference", [])
        try:
            refs = [refs] if isinstance(refs, str) else list(refs)
        except TypeError:
            raise InputError("a task's reference is not valid: a string or a list of them") from None
        fields = {"id": data.get("id", "task"), "url": data["url"], "goal": data["goal"], "reference": refs}
    try:
        return TaskSpec.model_validate({**fields, "options": options, "browser": browser})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        if err["type"] == "value_error":  # the task as a whole (a benchmark task's expect)
            raise InputError(str(err["msg"]).removeprefix("Value error, ")) from None
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
