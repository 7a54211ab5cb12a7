"""The tools ``webagent mcp`` offers, and what each returns.

Every tool turns webagent's own errors (a bad URL, a URL the navigation policy refuses, a site
that cannot be reached, a model server that does not answer, an unknown session id) into one MCP
tool error with the error's one-line message; a run that ended with stop reason ``error`` is a
tool error too, and so are arguments that do not fit a tool's input schema (``argument_error``).
Secrets never appear in what a tool returns: runs, checks and extractions redact them, and the
tools name secrets only by their names.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import structlog
from mcp.server.mcpserver import Context, Image
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field, ValidationError

from ..agent import Agent
from ..config import ContextSettings
from ..errors import InputError, WebAgentError
from ..records import DownloadedFile, RunResult
from ..roles.extractor import ExtractionSchema
from ..runtime.access import client_start
from ..tasks import UNTRUSTED_BROWSER_KEYS, TaskOptions, TaskSpec
from .handoff import elicitation_asker
from .sessions import SessionStore

__all__ = [
    "CheckOutcome",
    "Closed",
    "Extracted",
    "SessionOpened",
    "TaskOutcome",
    "WebTools",
    "argument_error",
    "description_of",
]

log = structlog.get_logger("webagent.mcp")
P = ParamSpec("P")
R = TypeVar("R")

SessionId = Annotated[str, Field(description="The id open_session returned")]


class TaskOutcome(BaseModel):
    """How a task (run_task) or a step on a session (act) ended."""

    success: bool = Field(description="True only when the validator accepted the answer")
    answer: str | None = Field(description="The answer the agent gave (the last one judged)")
    stop_reason: str = Field(
        description="answered, max_steps, max_time, budget, or needs_human (a person was needed and none answered)"
    )
    message: str = Field(description="Why the run stopped, in words")
    steps: int
    final_url: str = Field(description="The URL the page was at when the run ended")
    feedback: list[str] = Field(description="The validator's feedback on each answer, in order")
    run_dir: str | None = Field(description="The run directory: trajectory.jsonl, screenshots, report.html")
    downloads: list[DownloadedFile] = Field(
        default=[],
        description="The files the pages downloaded, kept on the server (name, path, bytes, url): in the run "
        "directory's downloads/ folder",
    )


class SessionOpened(BaseModel):
    session_id: str
    url: str
    title: str


class CheckOutcome(BaseModel):
    holds: bool = Field(description="Whether the validator judged that the statement holds on the page now")
    feedback: str = Field(description="The validator's reason")
    url: str
    run_dir: str | None


#: Any JSON value, each kind named (an untyped property is what MCP clients warn about).
JsonData = dict[str, Any] | list[Any] | str | int | float | bool | None


class Extracted(BaseModel):
    value: JsonData = Field(description="The data, valid against the JSON schema given (a string without one)")


class Closed(BaseModel):
    session_id: str
    closed: bool = True


class _Text(BaseModel):
    """The default extraction: the data as text."""

    value: str = Field(description="The data asked for, as shown on the page")


def argument_error(tool: str, exc: ValidationError) -> str:
    """One line for arguments that do not fit ``tool``'s input schema (the SDK's own text is
    pydantic's, over several lines with a link)."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        message = error["msg"][:1].lower() + error["msg"][1:]
        got = f" (got {error['input']!r})" if error["type"] != "missing" else ""
        problems.append(f"{where}: {message}{got}")
    return f"Error executing tool {tool}: invalid arguments: {'; '.join(problems)}"


def description_of(tool: Callable[..., Any]) -> str:
    """A tool's description: its docstring's paragraphs, each on one line (no source indentation)."""
    paragraphs = inspect.cleandoc(tool.__doc__ or "").split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs)


def _tool_errors(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """webagent's errors as one-line MCP tool errors."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except WebAgentError as exc:
            log.info("mcp_tool_error", tool=fn.__name__, error=str(exc))
            raise ToolError(f"{type(exc).__name__}: {exc}") from None

    return call


class WebTools:
    """The tools, bound to one agent and its kept sessions."""

    def __init__(self, agent: Agent, sessions: SessionStore, *, output_dir: Path | None) -> None:
        self.agent = agent
        self.sessions = sessions
        self.output_dir = output_dir

    @_tool_errors
    async def run_task(
        self,
        url: Annotated[str, Field(description="The start page, e.g. https://example.com")],
        goal: Annotated[str, Field(description="What to accomplish or find out, in plain language")],
        max_steps: Annotated[
            int | None, Field(ge=1, description="Steps in all, the last asking for the final answer")
        ] = None,
        expect: Annotated[
            str | None, Field(description="A statement about the final page the validator must also confirm")
        ] = None,
        browser: Annotated[
            dict[str, Any] | None,
            Field(
                description="This run's browser session settings over the server's: locale, timezone_id, "
                "user_agent, color_scheme, geolocation, device, extra_http_headers (a signed-in state: profile)"
            ),
        ] = None,
        profile: Annotated[
            str | None,
            Field(
                description="A named profile whose saved browser state (a sign-in) the run starts with; needs a "
                "server started with --profile-dir and a profile an open_session has saved"
            ),
        ] = None,
        ctx: Context | None = None,
    ) -> TaskOutcome:
        """Open URL in a fresh browser context and run the agent until the validator accepts an
        answer to GOAL (and EXPECT, if given) or it runs out of steps; returns the validated answer
        and the run directory. What only a person can give (a 2FA code, a CAPTCHA) is asked of the
        client as an elicitation."""
        settings = self._browser(browser, profile)
        url, policy = await client_start(self.agent.runtime, url, server="the MCP server")
        options = _options(max_steps=max_steps, expect=expect)
        task = TaskSpec(id="run_task", url=url, goal=goal, options=options, browser=settings)
        ask = elicitation_asker(ctx) if ctx is not None else None
        output = self.output_dir / _run_name(self.agent.secrets.redact(goal)) if self.output_dir is not None else None
        spec = dataclasses.replace(
            task.run_spec(self.agent.config.agent), policy=policy, ask_user=ask, output_dir=output
        )
        stream = self.agent.start(spec)
        async for _ in stream:
            pass
        assert stream.result is not None
        return _outcome(stream.result)

    def _browser(self, browser: dict[str, Any] | None, profile: str | None) -> ContextSettings | None:
        """A run's session settings from a client: those a client may set (none of
        ``UNTRUSTED_BROWSER_KEYS``: the operator's files, proxies, credentials, checks), and the
        state of the server's ``profile``. An InputError names what is refused or wrong."""
        data = dict(browser or {})
        for key, why in UNTRUSTED_BROWSER_KEYS.items():
            if key in data:
                hint = "; pass profile= for a signed-in state" if key == "storage_state" else ""
                raise InputError(f"browser.{key}: a client of the MCP server may not set it ({why}){hint}")
        if profile is not None and profile.strip():
            data["storage_state"] = self.sessions.saved_state(profile)
        if not data:
            return None
        try:
            return ContextSettings.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            what = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
            raise InputError(f"browser.{where}: {what}") from None

    @_tool_errors
    async def open_session(
        self,
        url: Annotated[str, Field(description="The page to open, e.g. https://example.com")],
        profile: Annotated[
            str | None,
            Field(
                description="A named profile to keep the session signed in across sessions and restarts "
                "(its browser state is loaded now and saved after each act and at close; one session at a "
                "time uses it); needs a server started with --profile-dir"
            ),
        ] = None,
    ) -> SessionOpened:
        """Open URL in a new browser session kept between calls (for act, check, extract,
        screenshot); returns its session id. Close it with close_session when done."""
        kept = await self.sessions.open(url, profile=profile)
        return SessionOpened(session_id=kept.id, url=kept.url, title=kept.title)

    @_tool_errors
    async def act(
        self,
        session_id: SessionId,
        goal: Annotated[str, Field(description="What to do on the page, in plain language")],
        max_steps: Annotated[
            int | None, Field(ge=1, description="Steps in all, the last asking for the final answer")
        ] = None,
        ctx: Context | None = None,
    ) -> TaskOutcome:
        """Run the agent toward GOAL from the session's page as it is (nothing is reopened); the
        page stays where the run left it (a new tab it switched to included). What only a person can
        give is asked of the client as an elicitation; the session's browser waits meanwhile."""
        ask = elicitation_asker(ctx) if ctx is not None else None
        async with self.sessions.use(session_id) as kept:
            result = await kept.pilot.act(goal, max_steps=max_steps, ask_user=ask)
            await kept.follow_pilot()
        return _outcome(result)

    @_tool_errors
    async def check(
        self,
        session_id: SessionId,
        statement: Annotated[str, Field(description="What should be true of the page now")],
    ) -> CheckOutcome:
        """Ask the validator whether STATEMENT holds on the session's page as it is now."""
        async with self.sessions.use(session_id) as kept:
            result = await kept.pilot.check(statement)
        run_dir = str(result.run_dir) if result.run_dir is not None else None
        return CheckOutcome(holds=result.holds, feedback=result.feedback, url=result.url, run_dir=run_dir)

    @_tool_errors
    async def extract(
        self,
        session_id: SessionId,
        what: Annotated[str, Field(description="The data to read off the page, in plain language")],
        json_schema: Annotated[
            dict[str, Any] | None, Field(description="A JSON schema (an object's) the data must follow")
        ] = None,
    ) -> Extracted:
        """Read WHAT off the session's page as it is now: JSON valid against JSON_SCHEMA, or text."""
        schema = ExtractionSchema.of_json_schema(json_schema, what="json_schema") if json_schema is not None else None
        async with self.sessions.use(session_id) as kept:
            if schema is None:
                text = await kept.pilot.extract(what, schema=_Text)
                return Extracted(value=text.value)
            return Extracted(value=await kept.pilot.extract_json(what, schema))

    @_tool_errors
    async def screenshot(self, session_id: SessionId) -> Image:
        """A PNG screenshot of the session's page (its viewport) as it is now."""
        async with self.sessions.use(session_id) as kept:
            return Image(data=await kept.pilot.screenshot(), format="png")

    @_tool_errors
    async def close_session(self, session_id: SessionId) -> Closed:
        """Close a session and its browser context."""
        await self.sessions.close(session_id)
        return Closed(session_id=session_id)


def _options(**given: object) -> TaskOptions:
    """A run's options from a tool's arguments (one line naming the first that is wrong)."""
    try:
        return TaskOptions.model_validate({k: v for k, v in given.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise InputError(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None


def _outcome(result: RunResult) -> TaskOutcome:
    if result.stop_reason == "error":  # the model server down, the browser gone: the call failed
        where = f" (run directory: {result.output_dir})" if result.output_dir else ""
        raise ToolError(f"the run failed: {result.message}{where}")
    return TaskOutcome(
        success=result.success,
        answer=result.answer,
        stop_reason=result.stop_reason,
        message=result.message,
        steps=result.steps,
        final_url=result.final_url,
        feedback=result.feedback,
        run_dir=result.output_dir,
        downloads=result.downloads,
    )


def _run_name(goal: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", goal.lower()).strip("-")[:40] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{time.monotonic_ns() % 10_000:04d}"
