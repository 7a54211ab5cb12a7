"""Tasks as data: ``TaskSpec``, its ``TaskOptions`` and ``RunLimits``, and the one conversion of a
task to a run (``TaskSpec.run_spec``).

A task (``TaskSpec``) is its id, where it starts, its goal, where its reward comes from (the
validator; reference answers; or a benchmark page that judges itself: ``webagent.tasks.benchmarks``)
and how its runs are run (``TaskOptions``: an expectation the validator must also confirm, loop
limits and budgets, a trace) in which browser session (``browser``: a signed-in ``storage_state``, a
proxy, a locale, ...). Every entry point that runs a task turns it into its ``RunSpec`` through
``run_spec``: the batch and suite task runner, ``WebEnv.reset`` and its adapters, the MCP server's
``run_task`` and ``Pilot.act``. An option an entry point cannot honour is refused there, never dropped.

A task of a file is data, not configuration, unless the operator says otherwise (``--trust-tasks``,
``load_tasks(trusted=True)``; docs/security.md, "Who is trusted where"): a line of a file not
trusted may not name a secret (``{{NAME}}`` anywhere), read the operator's files, send through the
operator's proxy or credentials, or weaken the browser (``UNTRUSTED_BROWSER_KEYS``), and its start
is an ``http(s)`` URL that lets the run reach no other local address (``runtime.access.data_start``).
A task built in code speaks for the operator (``TaskSpec.trusted``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..config import AgentConfig, AgentSettings, ContextSettings
from ..errors import InputError
from ..guard.navigation import NavigationPolicy
from ..guard.urls import normalize_url
from ..inputs import MAX_GOAL_CHARS
from ..loop import Judge
from ..runtime.spec import RunSpec, TraceMode
from .benchmarks import BenchmarkTask, benchmark_task

__all__ = [
    "OPTION_KEYS",
    "RUN_LIMITS",
    "TRUST_HINT",
    "UNTRUSTED_BROWSER_KEYS",
    "RunLimits",
    "TaskOptions",
    "TaskSpec",
    "TraceMode",
    "distrust",
    "guarded",
]


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
        if self.benchmark is not None and self.options.expect is not None:
            raise ValueError(f"task {self.id!r}: expect: a benchmark task is judged by its page, not the validator")
        if not self.trusted:
            refusal = distrust(self._as_data())
            if refusal is not None:
                raise ValueError(f"task {self.id!r}: {refusal}")
        return self

    def _as_data(self) -> dict[str, Any]:
        browser = self.browser.model_dump(exclude_unset=True, mode="json") if self.browser is not None else None
        url = self.url if self.benchmark is None else "https://benchmark.invalid/"  # webagent's own server
        return {"url": url, "goal": self.goal, "expect": self.options.expect, "browser": browser}

    def run_spec(
        self,
        settings: AgentSettings,
        *,
        judge: Judge | None = None,
        page: BenchmarkTask | None = None,
        cannot: Mapping[str, str] | None = None,
    ) -> RunSpec:
        """The run of this task, the one conversion every entry point makes: its start and goal (a
        benchmark task's: those of its page, ``page`` or the one ``benchmark`` and ``seed`` name, which
        judges the run), its ``expect``, its limits and budgets over ``settings`` (the config's
        ``[agent]``), its ``browser`` session settings, and ``judge`` (answers judged by the caller's,
        e.g. reference answers, instead of the validator).

        ``expect`` needs the validator: with ``judge`` or a benchmark page it is refused. ``cannot``:
        what the calling entry point cannot honour (an option's name, or ``browser``),
        each with why; a task that sets one is refused with an InputError naming it, never run
        without it. The trace (``options.trace``) is one of the run's outputs, kept where the run has a
        folder; an entry point that keeps none names it here.
        """
        for key, why in (cannot or {}).items():
            if self._sets(key):
                raise InputError(f"task {self.id!r}: {key} cannot be honoured here ({why})")
        if self.benchmark is not None and page is None:
            page = benchmark_task(self.benchmark, self.seed)
        options = self.options
        if options.expect is not None and (judge is not None or page is not None):
            by = "its page" if page is not None else "the caller's judge (reference answers)"
            raise InputError(
                f"task {self.id!r}: expect cannot be honoured here (answers are judged by {by}, not the validator)"
            )
        return RunSpec(
            url=page.url if page is not None else self.url,
            goal=page.goal if page is not None else self.goal,
            expect=options.expect,
            settings=options.settings(settings),
            judge=judge,
            task=page,
            browser=self.browser,
            trace=options.trace,
        )

    def _sets(self, key: str) -> bool:
        """Whether the task sets ``key`` (an option other than its default, or ``browser``)."""
        if key == "browser":
            return self.browser is not None and bool(self.browser.model_fields_set)
        if key not in OPTION_KEYS:
            raise ValueError(f"no task option named {key!r}")
        return bool(getattr(self.options, key) != TaskOptions.model_fields[key].default)


def distrust(data: dict[str, Any], hint: str = TRUST_HINT, who: str = "in a file that is not trusted") -> str | None:
    """Why a task or check of a file not trusted may not be run as it is written (``data``: its line or
    mapping), or None: a ``{{NAME}}`` anywhere, a ``browser`` key of ``UNTRUSTED_BROWSER_KEYS``, a
    start URL that is not ``http(s)``. One phrase naming the key, ``who`` it is refused from and
    ``hint`` (the flag)."""
    found = _placeholder_at(data, "")
    if found is not None:
        return f"{found}: a {{{{NAME}}}} secret placeholder is refused {who}; {hint}"
    browser = data.get("browser")
    if isinstance(browser, dict):
        for key, why in UNTRUSTED_BROWSER_KEYS.items():
            if browser.get(key) not in (None, False, [], ""):
                return f"browser.{key}: refused {who} ({why}); {hint}"
    url = next((data[k] for k in ("url", "web") if isinstance(data.get(k), str)), None)
    if url is not None and "task" not in data:
        scheme = urlsplit(normalize_url(url)).scheme if _normalizes(url) else ""
        if scheme and scheme not in ("http", "https"):
            return f"url: a {scheme}: start URL is refused {who} (http and https only); {hint}"
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
