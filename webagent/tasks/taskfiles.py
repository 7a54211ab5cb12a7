"""Task files and reference answers.

Task files: our JSONL (``{"id","url","goal"}``, with any of the options and a ``browser`` block),
benchmark tasks that reward themselves (``{"id", "task": "miniwob/click-button", "seed": 3}``:
``webagent.tasks.benchmarks``) and WebVoyager's (``{"web_name","id","ques","web"}``), plus reference
answers (WebVoyager ``reference_answer.json`` style, or a plain ``{id: answer}`` map). A file is read
as data unless the operator vouches for it (``trusted``; ``webagent.tasks.spec``'s docstring), and
each task's run directory is named from its id (``run_dir_name``), two ids never sharing one.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..config import ContextSettings
from ..errors import InputError
from ..files.disk import MAX_NAME_BYTES, cut_utf8
from ..guard.urls import normalize_url
from ..inputs import check_text, load_json, not_utf8_at, read_text
from .benchmarks import benchmark_task
from .spec import OPTION_KEYS, TRUST_HINT, TaskOptions, TaskSpec, distrust

__all__ = [
    "browser_settings",
    "check_run_dirs",
    "load_references",
    "load_tasks",
    "reference_matches",
    "run_dir_name",
    "task_options",
]

_HASHED = re.compile(r"-[0-9a-f]{8}$")


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
            task = task.model_copy(update={"browser": browser_settings(data["browser"], where, path.parent)})
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


def browser_settings(value: Any, where: str, base: Path | None = None) -> ContextSettings | None:
    """A task's ``browser`` settings (InputError naming ``where`` and the key), relative paths taken
    from ``base`` (a task file's folder; None: as given)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InputError(f"{where}: 'browser' must be an object of [browser] session settings")
    try:
        settings = ContextSettings.model_validate(value)
        return settings.relative_to(base) if base is not None else settings
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        secret = err["loc"][:1] in (("proxy",), ("http_credentials",))  # never quote a password
        got = "" if secret or err["type"] == "extra_forbidden" else f" (got {err.get('input')!r})"
        what = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        raise InputError(f"{where}: browser.{loc}: {what}{got}") from None


def _parse_benchmark(data: dict[str, Any], where: str) -> TaskSpec:
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


def task_options(data: dict[str, Any], where: str) -> TaskOptions:
    """A task's options, from the ``OPTION_KEYS`` of its line or mapping (InputError naming ``where`` and the key)."""
    try:
        options = TaskOptions.model_validate({k: data[k] for k in OPTION_KEYS if k in data})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise InputError(f"{where}: {key}: {err['msg']}") from None
    return options


def _parse_task(data: dict[str, Any], where: str) -> TaskSpec:
    options = task_options(data, where)
    task = _parse_line(data, where)
    if task.benchmark is not None and options.expect is not None:  # TaskSpec.run_spec would refuse it
        raise InputError(f"{where}: expect: a benchmark task is judged by its page, not the validator")
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
