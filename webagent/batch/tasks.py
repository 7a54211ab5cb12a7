"""Tasks as data, and task files.

A task (``TaskSpec``) is its id, where it starts, its goal, where its reward comes from (the
validator; reference answers; or a benchmark page that judges itself) and how its runs are run
(``TaskOptions``: an expectation the validator must also confirm, loop limits, a trace). The batch
runner, the Ray actors and ``webagent test`` run nothing else (``webagent.batch.TaskRunner``).

Task files: our JSONL (``{"id","url","goal"}``, with any of the options), benchmark tasks that
reward themselves (``{"id", "task": "miniwob/click-button", "seed": 3}``: ``webagent.env.tasks``)
and WebVoyager's (``{"web_name","id","ques","web"}``), plus reference answers (WebVoyager
``reference_answer.json`` style, or a plain ``{id: answer}`` map).

A task file is data, not configuration, unless the operator says otherwise (``--trust-tasks``,
``load_tasks(trusted=True)``; docs/security.md, "Who is trusted where"): a line of a file not
trusted may not name a secret (``{{NAME}}`` anywhere), read the operator's files, send through the
operator's proxy or credentials, or weaken the browser (``UNTRUSTED_BROWSER_KEYS``), and its start
is an ``http(s)`` URL that lets the run reach no other local address (``runtime.access.data_start``).
A task built in code speaks for the operator (``TaskSpec.trusted``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..config import AgentConfig, AgentSettings, ContextSettings
from ..errors import InputError
from ..files import MAX_NAME_BYTES, cut_utf8
from ..inputs import MAX_GOAL_CHARS, check_text, load_json, not_utf8_at, read_text
from ..safety import NavigationPolicy
from ..stream import TraceMode
from ..urls import normalize_url

__all__ = [
    "OPTION_KEYS",
    "RUN_LIMITS",
    "UNTRUSTED_BROWSER_KEYS",
    "RunLimits",
    "TaskOptions",
    "TaskSpec",
    "check_run_dirs",
    "distrust",
    "guarded",
    "load_references",
    "load_tasks",
    "reference_matches",
    "run_dir_name",
]

_HASHED = re.compile(r"-[0-9a-f]{8}$")
_PLACEHOLDER = re.compile(r"\{\{\s*[A-Za-z_][A-Za-z0-9_]*\s*\}\}")
#: The ``browser`` keys a task or suite file not trusted may not set, and why: they read the
#: operator's files, carry the operator's secrets, route traffic through the operator's
#: infrastructure, or weaken what the browser checks or allows.
UNTRUSTED_BROWSER_KEYS = {
    "storage_state": "it loads the operator's signed-in state",
    "upload_dir": "it lets pages receive the operator's files",
    "upload_files": "it lets pages receive the operator's files",
    "proxy": "it routes traffic through a proxy of the operator's choosing",
    "http_credentials": "it answers sites with the operator's credentials",
    "ignore_https_errors": "it turns off the check of sites' certificates",
    "permissions": "it grants every site permissions on the operator's machine",
}
#: What a refusal tells the operator.
TRUST_HINT = "pass --trust-tasks if the file is yours"


class RunLimits(BaseModel):
    """The loop limits a task (or a suite check, or a suite's defaults) may set for its runs; None
    keeps the config's ``[agent]`` setting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_steps: int | None = Field(default=None, gt=0)
    max_time_s: float | None = Field(default=None, gt=0)
    max_attempts: int | None = Field(default=None, gt=0)
    budget_calls: int | None = Field(default=None, ge=0)
    budget_tokens: int | None = Field(default=None, ge=0)
    budget_usd: float | None = Field(default=None, ge=0)

    def limits(self) -> dict[str, int | float]:
        """The limits set (the config's replaced by these)."""
        return {k: v for k in RUN_LIMITS if (v := getattr(self, k)) is not None}

    def settings(self, base: AgentSettings) -> AgentSettings:
        """``base`` (the config's loop settings) with these limits applied."""
        update = self.limits()
        return base.model_copy(update=update) if update else base


#: The keys of ``RunLimits``.
RUN_LIMITS = tuple(RunLimits.model_fields)


class TaskOptions(RunLimits):
    """How a task's runs are run, beside the runner's own settings (attempts, watchdog)."""

    expect: str | None = Field(
        default=None, max_length=MAX_GOAL_CHARS, description="A statement the validator must also confirm"
    )
    trace: TraceMode = Field(default="off", description="Keep a Playwright trace: always, on-failure or off")


#: The keys of a task-file line that set its options.
OPTION_KEYS = tuple(TaskOptions.model_fields)


class TaskSpec(BaseModel):
    """One task: where it starts, its goal, where its reward comes from, how it is run.

    The reward: a benchmark page's own verdict (``benchmark``, ``seed``), else the validator's, with
    ``reference`` answers compared to the answer in the results line."""

    model_config = ConfigDict(frozen=True)

    id: str
    url: str
    goal: str
    web_name: str | None = None
    reference: list[str] = []
    #: A benchmark task's name (``miniwob/click-button``): its page gives the goal and the success.
    benchmark: str | None = None
    seed: int | None = None
    options: TaskOptions = TaskOptions()
    #: The task's own browser session settings over the config's ``[browser]`` (a signed-in
    #: ``storage_state``, a ``proxy``, a ``locale``, a ``device``, ...).
    browser: ContextSettings | None = None
    #: False: from a task or suite file the operator did not mark trusted. Its start may be an
    #: ``http(s)`` URL only, and runs under ``runtime.access.data_start`` (a local start is that one
    #: ``host:port``; secrets without hosts of their own typed only on ``allowed_domains``); it may
    #: not name a secret or set ``UNTRUSTED_BROWSER_KEYS``.
    trusted: bool = True

    @model_validator(mode="after")
    def _data(self) -> TaskSpec:
        if not self.trusted:
            refusal = distrust(self._as_data())
            if refusal is not None:
                raise ValueError(f"task {self.id!r}: {refusal}")
        return self

    def _as_data(self) -> dict[str, Any]:
        browser = self.browser.model_dump(exclude_unset=True, mode="json") if self.browser is not None else None
        url = self.url if self.benchmark is None else "https://benchmark.invalid/"  # webagent's own server
        return {"url": url, "goal": self.goal, "expect": self.options.expect, "browser": browser}


def distrust(data: dict[str, Any], hint: str = TRUST_HINT) -> str | None:
    """Why a task or check of a file not trusted may not be run as it is written (``data``: its line or
    mapping), or None: a ``{{NAME}}`` anywhere, a ``browser`` key of ``UNTRUSTED_BROWSER_KEYS``, a
    start URL that is not ``http(s)``. One phrase naming the key and ``hint`` (the flag)."""
    found = _placeholder_at(data, "")
    if found is not None:
        return f"{found}: a {{{{NAME}}}} secret placeholder is refused in a file that is not trusted; {hint}"
    browser = data.get("browser")
    if isinstance(browser, dict):
        for key, why in UNTRUSTED_BROWSER_KEYS.items():
            if browser.get(key) not in (None, False, [], ""):
                return f"browser.{key}: refused in a file that is not trusted ({why}); {hint}"
    url = next((data[k] for k in ("url", "web") if isinstance(data.get(k), str)), None)
    if url is not None and "task" not in data:
        scheme = urlsplit(normalize_url(url)).scheme if _normalizes(url) else ""
        if scheme and scheme not in ("http", "https"):
            return f"url: a {scheme}: start URL is refused in a file that is not trusted (http and https only); {hint}"
    return None


def _normalizes(url: str) -> bool:
    try:
        normalize_url(url)
    except InputError:
        return False  # the line's own error says what is wrong with it
    return True


def _placeholder_at(value: Any, where: str) -> str | None:
    """The key (dotted) of the first string in ``value`` holding a ``{{NAME}}``; None if none does."""
    if isinstance(value, str):
        return (where or "the line") if _PLACEHOLDER.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _placeholder_at(item, f"{where}.{key}" if where else str(key))
            if found is not None:
                return found
    if isinstance(value, list):
        for item in value:
            found = _placeholder_at(item, where)
            if found is not None:
                return found
    return None


def guarded(task: TaskSpec, config: AgentConfig) -> bool:
    """Whether ``task``'s sessions are guarded under ``config``: they want a hardened browser, which
    the first one launched (``BrowserPool.start``) had better be. A start someone else chose always
    is (no ``file:``, no other local address: ``attempts.TaskRunner.policy``); the operator's as
    ``Runtime.navigation_policy`` rules it (a bad URL: no, its run says why)."""
    if task.benchmark is not None or not task.trusted:
        return True
    browser = config.browser
    try:
        policy = NavigationPolicy.build(
            allowed=browser.allowed_domains,
            blocked=browser.blocked_domains,
            private_network=browser.private_network,
            start_url=task.url,
        )
    except ValueError:
        return False
    return policy.active


def load_tasks(path: str | Path, *, trusted: bool = False, hint: str = TRUST_HINT) -> list[TaskSpec]:
    """Read a task file; a bad line is an InputError naming the file and line number. ``trusted``:
    the operator vouches for the file (``--trust-tasks``); otherwise its lines are data
    (``distrust``: what they may not hold; ``hint``: what a refusal tells, for a command without
    ``--trust-tasks``) and its tasks are run as such (``TaskSpec.trusted``)."""
    path = Path(path)
    text = read_text(path, "task file")
    tasks: list[TaskSpec] = []
    seen: set[str] = set()
    dirs: dict[str, tuple[str, int | None]] = {}  # each id's run directory (``_claim_run_dir``)
    for number, raw in enumerate(text.split("\n"), start=1):  # not splitlines(): U+2028 may sit in a string
        line = raw.removesuffix("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{path}:{number}"
        try:
            data = load_json(line, where)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise InputError(f"{where}: a task must be a JSON object")
        if not trusted:
            refusal = distrust(data, hint)
            if refusal is not None:
                raise InputError(f"{where}: {refusal}")
        task = _parse_task(data, where)
        if "browser" in data:
            task = task.model_copy(update={"browser": _browser(data["browser"], where, path.parent)})
        if not trusted:
            task = task.model_copy(update={"trusted": False})
        if task.id in seen:
            raise InputError(f"{where}: duplicate task id {task.id!r}")
        seen.add(task.id)
        _claim_run_dir(dirs, task.id, where, number)  # at its own line: the first bad line is named
        tasks.append(task)
    if not tasks:
        raise InputError(f"task file {path} has no tasks")
    return tasks


def _browser(value: Any, where: str, base: Path) -> ContextSettings | None:
    """A task's ``browser`` settings, relative paths taken from the task file's folder."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InputError(f"{where}: 'browser' must be an object of [browser] session settings")
    try:
        return ContextSettings.model_validate(value).relative_to(base)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        secret = err["loc"][:1] in (("proxy",), ("http_credentials",))  # never quote a password
        got = "" if secret or err["type"] == "extra_forbidden" else f" (got {err.get('input')!r})"
        what = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        raise InputError(f"{where}: browser.{loc}: {what}{got}") from None


def _parse_benchmark(data: dict[str, Any], where: str) -> TaskSpec:
    from ..env.tasks import benchmark_task  # the task sets (MiniWoB++ and registered ones)

    name, seed = data["task"], data.get("seed")
    if not isinstance(name, str) or not name.strip():
        raise InputError(f"{where}: 'task' must name a benchmark task, e.g. \"miniwob/click-button\"")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise InputError(f"{where}: 'seed' must be an integer")
    try:
        found = benchmark_task(name, seed)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    task_id = data.get("id", f"{name}@{seed}" if seed is not None else name)
    if not isinstance(task_id, str | int) or str(task_id).strip() == "":
        raise InputError(f"{where}: task id must be a non-empty string")
    return TaskSpec(id=str(task_id), url=name, goal=found.goal, benchmark=name, seed=seed)


def _parse_options(data: dict[str, Any], where: str) -> TaskOptions:
    try:
        options = TaskOptions.model_validate({k: data[k] for k in OPTION_KEYS if k in data})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise InputError(f"{where}: {key}: {err['msg']}") from None
    return options


def _parse_task(data: dict[str, Any], where: str) -> TaskSpec:
    options = _parse_options(data, where)
    task = _parse_line(data, where)
    return task.model_copy(update={"options": options}) if options != TaskOptions() else task


def _parse_line(data: dict[str, Any], where: str) -> TaskSpec:
    if "task" in data:  # a benchmark task: {"id", "task": "miniwob/click-button", "seed": 3}
        return _parse_benchmark(data, where)
    if "ques" in data or "web" in data:  # WebVoyager
        missing = [k for k in ("id", "ques", "web") if k not in data]
        if missing:
            raise InputError(f"{where}: WebVoyager task lacks {', '.join(missing)}")
        task_id, goal, url, web_name = data["id"], data["ques"], data["web"], data.get("web_name")
    else:
        missing = [k for k in ("id", "url", "goal") if k not in data]
        if missing:
            raise InputError(f'{where}: task lacks {", ".join(missing)} (expected {{"id", "url", "goal"}})')
        task_id, goal, url, web_name = data["id"], data["goal"], data["url"], data.get("web_name")
    if isinstance(task_id, bool) or not isinstance(task_id, str | int) or str(task_id).strip() == "":
        raise InputError(f"{where}: task id must be a non-empty string, not {json.dumps(task_id)[:40]}")
    if not isinstance(goal, str) or not goal.strip():
        raise InputError(f"{where}: the goal must be a non-empty string")
    try:
        check_text(goal, "the goal")
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    try:
        url = normalize_url(str(url))
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    reference = data.get("reference", data.get("answer"))
    if reference is None:
        refs: list[str] = []
    elif isinstance(reference, str | int | float):
        refs = [str(reference)]
    elif isinstance(reference, list):
        refs = [str(r) for r in reference]
    else:
        raise InputError(f"{where}: the reference answer must be a string or a list of strings")
    if web_name is not None and not isinstance(web_name, str):
        raise InputError(f"{where}: web_name must be a string")
    return TaskSpec(id=str(task_id), url=url, goal=goal, web_name=web_name, reference=refs)


def load_references(path: str | Path) -> dict[str, list[str]]:
    """Reference answers by task id.

    Accepts WebVoyager's ``{"Allrecipes": {"answers": [{"id": 0, "type": "golden", "ans": "..."}]}}``
    (task ids ``Allrecipes--0``) and a plain ``{"task-id": "answer" | ["answer", ...]}`` map.
    """
    path = Path(path)
    text = read_text(path, "reference file")
    try:
        data = load_json(text, str(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"cannot read reference file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"reference file {path} must hold a JSON object")
    refs: dict[str, list[str]] = {}
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(value.get("answers"), list):
            for item in value["answers"]:
                if isinstance(item, dict) and "id" in item and "ans" in item:
                    refs.setdefault(f"{key}--{item['id']}", []).append(str(item["ans"]))
        elif isinstance(value, str):
            refs[str(key)] = [value]
        elif isinstance(value, list):
            refs[str(key)] = [str(v) for v in value]
        else:
            raise InputError(f"reference file {path}: cannot read the entry {key!r}")
    return refs


def reference_matches(answer: str | None, references: list[str]) -> bool:
    """Whether an answer contains one of the references (case- and space-insensitive)."""
    if not answer or not references:
        return False
    norm = " ".join(answer.lower().split())
    return any(" ".join(ref.lower().split()) in norm for ref in references if ref.strip())


def run_dir_name(task_id: str) -> str:
    """The directory name of a task's runs: the id itself when it is a safe file name, else the id
    made safe, cut to ``MAX_NAME_BYTES`` bytes of UTF-8 (on a character boundary: a file name is
    limited in bytes, and 100 letters of a 4-byte script are 400), with its hash appended
    (``a/b`` -> ``a_b-3ec69c85``). An id that already ends like such a name gets a hash too, so
    that no two ids share a name (up to a 32-bit hash collision, which ``check_run_dirs`` refuses).
    Any id gets a name: a lone surrogate (which JSON's escapes can hold) is replaced like any other
    character a file name should not have."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in task_id)
    name = cut_utf8(safe.strip("."), MAX_NAME_BYTES) or "task"
    if name != task_id or _HASHED.search(task_id):
        name += "-" + hashlib.sha1(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return name


def check_run_dirs(task_ids: Iterable[str], where: str = "the tasks") -> None:
    """InputError when two task ids would share a run directory (case ignored, as some file
    systems do: ``Task`` and ``task`` would), or for an id no results line could hold (a lone
    surrogate, which a JSON escape can write: UTF-8 cannot carry it)."""
    seen: dict[str, tuple[str, int | None]] = {}
    for task_id in task_ids:
        _claim_run_dir(seen, task_id, where)


def _claim_run_dir(seen: dict[str, tuple[str, int | None]], task_id: str, where: str, line: int | None = None) -> None:
    """``task_id``'s run directory taken in ``seen`` (its name, case ignored -> the id and the line
    of the file it is on, if any); InputError naming ``where`` when another id took it already or
    when UTF-8 cannot carry the id (``check_run_dirs``)."""
    if (at := not_utf8_at(task_id)) is not None:
        raise InputError(f"{where}: task id {task_id!r} is not valid text at character {at}; give it in UTF-8")
    name = run_dir_name(task_id)
    other, other_line = seen.setdefault(name.lower(), (task_id, line))
    if other != task_id:
        on = f", {other!r} on line {other_line}" if other_line is not None else ""
        raise InputError(
            f"{where}: task ids {other!r} and {task_id!r} would share the run directory {name!r} "
            f"(file names ignore case on some systems{on}); rename one"
        )
