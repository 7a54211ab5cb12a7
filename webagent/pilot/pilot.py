"""``Pilot``: act, check and extract on a page the caller drives (``Agent.pilot(page)``)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import structlog
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page
from pydantic import BaseModel, ValidationError

from ..browser.crashes import browser_failure
from ..browser.deadline import within
from ..budget import Budget
from ..config import ROLES, ContextSettings
from ..errors import InputError, ModelError, NavigationError
from ..guard.navigation import NavigationPolicy
from ..guard.urls import normalize_url
from ..inputs import check_text
from ..loop import HumanHandler, Meter
from ..model.parsing import ReplyParseError
from ..record import Recorder, run_recorder
from ..records import CheckResult, ModelCall, RunResult, Step, Usage, Verdict
from ..replay import ReplayCache
from ..roles.checker import Checker, CheckReply
from ..roles.extractor import ExtractionSchema, Extractor
from ..roles.policy import PolicyImages
from ..runtime import RunSpec, Runtime
from ..stream import RunStream
from ..tasks import TaskOptions, TaskSpec
from .look import Look, look_at, record_look

__all__ = ["Pilot"]

log = structlog.get_logger("webagent.pilot")
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
_WEB_SCHEMES = ("http://", "https://", "file:")


class Pilot:
    """Natural-language steps, checks and extractions on one page; the page is never closed.

    Calls on one pilot run one at a time (a second waits for the first). ``usage`` sums every
    model call made; ``run_dirs`` lists the run directories written, the latest last. ``page`` is
    the tab the pilot drives: after ``act`` the one the run ended on (a new tab it switched to).

    ``policy``: one navigation policy for every call, whatever the page's URL (``Agent.pilot``).
    """

    def __init__(
        self,
        runtime: Runtime,
        page: Page,
        *,
        output_dir: str | Path | None = None,
        replay: ReplayCache | None = None,
        budgets: Sequence[Budget] = (),
        policy: NavigationPolicy | None = None,
        browser: ContextSettings | None = None,
    ) -> None:
        """``browser``: the session settings the page's context was opened with (its signed-in
        state's values are redacted from what the pilot writes and sends)."""
        self.runtime = runtime
        self.browser = browser
        #: What the pilot redacts: the config's secrets and what the page's session settings hold.
        self.secrets = runtime.sessions.secrets(browser)
        #: Whether its run directories are its owner's only (it holds a secret: ``webagent.files.disk``).
        self.private = runtime.sessions.private(browser)
        self.page = page
        self.policy = policy
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.replay = replay
        self.budgets = list(budgets)
        self.usage = Usage()
        self.run_dirs: list[Path] = []
        self._numbers: Counter[str] = Counter()
        self._acts: Counter[str] = Counter()  # the calls of act per goal so far: each has its own recording
        self._lock = asyncio.Lock()
        self._checker: Checker | None = None
        self._extractor: Extractor | None = None
        #: The policy family's request extras (what a run's policy sends).
        self._images = PolicyImages.from_config(runtime.config)

    # -- the public calls ------------------------------------------------------------------------

    async def goto(self, url: str) -> None:
        """Open ``url`` in the page under the navigation policy a run starting there has
        (NavigationError when it is refused or cannot be opened)."""
        url = normalize_url(url)
        driver_of = self.runtime.page_driver(self._open_page(), guard_url=url, policy=self.policy, secrets=self.secrets)
        async with self._lock, driver_of as driver:
            await driver.goto(url, start=True)

    async def act(self, goal: str, max_steps: int | None = None, *, ask_user: HumanHandler | None = None) -> RunResult:
        """Run the agent toward ``goal`` from the page as it is (no start URL is opened); the result
        is a run's (``success``: the validator accepted the answer). With a replay cache, steps
        recorded for this goal replay without model calls while the page matches (each act toward
        the same goal on this pilot has its own recording: the first, the second, ...). ``ask_user``:
        who answers the policy's questions (default: the agent's)."""
        goal = _given(goal, "goal", "say what the agent should do")
        if max_steps is not None and max_steps < 1:
            raise InputError(f"max_steps must be at least 1 (got {max_steps})")
        async with self._lock:
            self._acts[goal] += 1
            start = await self._start_url()
            task = TaskSpec(id="act", url=start, goal=goal, options=TaskOptions(max_steps=max_steps))
            spec = dataclasses.replace(
                task.run_spec(self.runtime.config.agent),
                page=self.page,
                navigate=False,
                policy=self.policy,
                browser=self.browser,
                ask_user=ask_user,
                # The caller's page speaks for the operator, unless the pilot has its caller's policy
                # (a kept MCP session: a client's start): then allowed_domains only (Runtime.secret_hosts).
                secret_hosts=self.runtime.secret_hosts(None if self.policy is not None else start),
                output_dir=self._run_dir("act"),
                cache=self.replay,
                cache_key=_act_key(goal, self._acts[goal]),
                shared_budgets=tuple(self.budgets),
            )
            stream = RunStream(self.runtime, spec)
            async for _ in stream:
                pass
            assert stream.result is not None
            result = stream.result
            ended_on = stream.session.page if stream.session is not None else None
            if ended_on is not None and ended_on is not self.page and not ended_on.is_closed():
                log.info("pilot_switched_tab", url=self.secrets.redact(ended_on.url))
                self.page = ended_on  # the run moved to a new tab (or off one that closed): follow it
        for role in ROLES:
            self.usage.role(role).add(result.usage.role(role))
        log.info("pilot_act", goal=goal, success=result.success, stop_reason=result.stop_reason, steps=result.steps)
        return result

    async def check(self, statement: str) -> CheckResult:
        """Whether ``statement`` holds on the page as it is now, in the validator's judgement, and
        its feedback. One model call, none when the replay cache has seen it hold on this page."""
        statement = _given(statement, "statement", "say what must hold on the page")
        key = f"check: {statement}"
        async with self._lock:
            look = await self._look()
            run_dir = self._run_dir("check")
            recorder = self._recorder(run_dir, look, f"Check: {statement}")
            cached = self._cached(key, look, lambda value: CheckReply.model_validate(value))
            meter = self._meter()
            if cached is None:
                checker = self._checker = self._checker or Checker(
                    self.runtime.model_client("validator", self.secrets),
                    extra_body=self.runtime.config.validator.extra_body(),
                )
                try:
                    reply, calls = await self._ask(
                        meter, lambda: checker.check(statement, look.url, look.title, look.image)
                    )
                except ModelError as exc:
                    await self._failed(recorder, look, f"Check: {statement}", meter, exc)
                    raise
            else:
                reply, calls = cached, []
            reply = self.secrets.redact_model(reply)  # what the model read of a secret on the page
            verdict = Verdict(success=reply.holds, feedback=reply.feedback)
            await record_look(
                recorder,
                look,
                goal=f"Check: {statement}",
                verdict=verdict,
                outcome=("the statement holds" if reply.holds else "the statement does not hold")
                + (" (the replay cache's verdict, given on this page state before)" if cached is not None else ""),
                calls=calls,
                usage=meter.usage,
                replayed=cached is not None,
            )
            if cached is None and reply.holds:
                self._store(key, look, reply.model_dump(mode="json"))
        log.info("pilot_check", statement=statement, holds=reply.holds, replayed=cached is not None)
        return CheckResult(
            holds=reply.holds,
            feedback=reply.feedback,
            run_dir=run_dir,
            url=look.url,
            replayed=cached is not None,
            usage=meter.usage.validator,
        )

    async def extract(self, what: str, *, schema: type[M]) -> M:
        """``what``, read off the page as it is now, as a validated instance of ``schema``.

        ExtractionError when the model's reply does not validate even after a repair request."""
        value = await self.extract_json(what, ExtractionSchema.of_model(schema))
        assert isinstance(value, schema)
        return value

    async def extract_json(self, what: str, schema: ExtractionSchema) -> Any:
        """``extract`` with a schema given as JSON schema and a parser (``ExtractionSchema``)."""
        what = _given(what, "what", "say what to extract")
        key = f"extract: {what} [{schema.digest}]"
        async with self._lock:
            look = await self._look()
            run_dir = self._run_dir("extract")
            goal = f"Extract: {what}"
            recorder = self._recorder(run_dir, look, goal)
            cached = self._cached(key, look, lambda value: schema.parse(json.dumps(value)))
            meter = self._meter()
            calls: list[ModelCall] = []
            if cached is not None:
                value = cached
            else:
                extractor = self._extractor = self._extractor or Extractor(
                    self.runtime.model_client("policy", self.secrets), extra_body=self._images.single_body
                )
                try:
                    value, calls = await self._ask(
                        meter, lambda: extractor.extract(what, look.url, look.title, look.image, schema)
                    )
                except ModelError as exc:
                    await self._failed(recorder, look, goal, meter, exc)
                    raise
            data = value.model_dump(mode="json") if isinstance(value, BaseModel) else value
            clean = self.secrets.redact_model(_Json(value=data)).value
            if clean != data:  # a secret the page showed is not handed back
                data, value = clean, schema.parse(json.dumps(clean))
            text = json.dumps(data, ensure_ascii=False)
            await record_look(
                recorder,
                look,
                goal=goal,
                verdict=Verdict(success=True, feedback=f"The reply validated against {schema.name}."),
                outcome="extracted"
                + (" (from the replay cache, on this page state before)" if cached is not None else ""),
                calls=calls,
                usage=meter.usage,
                answer=text,
                replayed=cached is not None,
            )
            if cached is None:
                self._store(key, look, data)
        log.info("pilot_extract", what=what, schema=schema.name, replayed=cached is not None)
        return value

    async def screenshot(self) -> bytes:
        """A PNG of the page's viewport as it is now."""
        timeout_s = self.runtime.config.browser.command_timeout_s
        if self.policy is not None:
            await self._start_url()
        try:
            return await within(self._open_page().screenshot(type="png"), timeout_s, "page.screenshot")
        except PlaywrightError as exc:  # a crash (the page gone) or a deadline: the infrastructure's
            raise browser_failure(exc, "cannot take a screenshot of the page") from None

    # -- the parts -------------------------------------------------------------------------------

    def _open_page(self) -> Page:
        if self.page.is_closed():
            raise InputError("the page this pilot drives has been closed")
        return self.page

    async def _start_url(self) -> str:
        """The page's URL; NavigationError when the pilot's fixed policy refuses it (a page that
        navigated itself elsewhere since: what it shows is not to be read)."""
        url = self._open_page().url
        if not url.startswith(_WEB_SCHEMES):
            raise InputError(f"the page is at {url!r}: open a web page first (page.goto(url) or pilot.goto(url))")
        if self.policy is not None:
            reason = await self.policy.check_resolved(url, navigation=True)
            if reason is not None:
                shown = self.secrets.redact(url)
                raise NavigationError(
                    f"the page is now at {shown}, which this session's navigation policy refuses ({reason}); "
                    "nothing was read from it"
                )
        return url

    def _run_dir(self, kind: str) -> Path | None:
        """The next free ``<kind>-<n>`` directory under ``output_dir`` (None without one)."""
        if self.output_dir is None:
            return None
        n = self._numbers[kind] + 1
        while (self.output_dir / f"{kind}-{n}").exists():
            n += 1
        self._numbers[kind] = n
        path = self.output_dir / f"{kind}-{n}"
        self.run_dirs.append(path)
        return path

    async def _look(self) -> Look:
        await self._start_url()
        async with self.runtime.page_driver(self.page, secrets=self.secrets) as driver:
            return await look_at(
                driver, self.runtime.config.localizer.resize_rule(), fingerprinted=self.replay is not None
            )

    def _meter(self) -> Meter:
        return Meter(self.runtime.run_budgets(self.runtime.config.agent, self.budgets))

    async def _ask(self, meter: Meter, call: Callable[[], Awaitable[tuple[T, ModelCall]]]) -> tuple[T, list[ModelCall]]:
        """One model call reserved in and charged to the budgets, its usage added to ``usage``."""
        step = Step(index=1, url=self.page.url)
        meter.reserve()
        try:
            value, record = await call()
            meter.charge(step, record)
        except ModelError as exc:
            meter.charge_failed(step, exc)
            raise
        finally:
            meter.account(step)
            for record in step.calls:
                self.usage.add_call(record)
        return value, step.calls

    def _recorder(self, run_dir: Path | None, look: Look, goal: str) -> Recorder:
        """The recorder of one check or extraction (its spans begin now): a run of one step on the page."""
        spec = RunSpec(
            url=look.url, goal=goal, page=self.page, navigate=False, browser=self.browser, output_dir=run_dir
        )
        return run_recorder(self.runtime, spec)

    async def _failed(self, recorder: Recorder, look: Look, goal: str, meter: Meter, exc: ModelError) -> None:
        """The record of a check or an extraction whose model call failed (its raw replies kept)."""
        await record_look(
            recorder,
            look,
            goal=goal,
            verdict=Verdict(success=False, feedback=str(exc)),
            outcome="failed",
            calls=[exc.call] if isinstance(exc.call, ModelCall) else [],
            usage=meter.usage,
            error=str(exc),
        )

    def _cached(self, key: str, look: Look, parse: Callable[[Any], T]) -> T | None:
        """The answer the replay cache has for ``key`` on this page state, still valid."""
        if self.replay is None or look.seen is None:
            return None
        any_origin = self.runtime.config.agent.replay_any_origin
        hit = self.replay.answer_for(key, look.seen, url=look.url, any_origin=any_origin)
        if hit is None:
            return None
        try:
            return parse(hit.value)
        except (ValidationError, ReplyParseError, ValueError) as exc:
            log.info("pilot_cache_entry_invalid", key=key, error=str(exc))
            return None

    def _store(self, key: str, look: Look, value: Any) -> None:
        if self.replay is not None and look.seen is not None:
            self.replay.store_answer(key, look.seen, value, url=look.url)


class _Json(BaseModel):
    value: Any


def _act_key(goal: str, occurrence: int) -> str:
    """The replay cache key of the ``occurrence``-th act toward ``goal`` on one pilot: ``act: <goal>``,
    then ``act#2: <goal>``, ... (the same goal from two page states is two recordings). Checks and
    extractions need no such number: their answers are kept per page state."""
    return f"act: {goal}" if occurrence == 1 else f"act#{occurrence}: {goal}"


def _given(text: str, what: str, hint: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"no {what} given: {hint}")
    check_text(text, f"the {what}")
    return text.strip()
