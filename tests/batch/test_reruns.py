"""Crash re-runs and the watchdog, with a fake agent (no browser): which runs are re-run, where
their files go, what one results line says."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from webagent.batch import CRASH_RERUNS, BatchRunner, TaskResult, read_results
from webagent.batch.summary import summarize
from webagent.errors import BrowserCrashError, BrowserError, BrowserTimeoutError, WebAgentError
from webagent.records import ModelCall, RoleUsage, RunResult, Step, Timings, Usage
from webagent.runtime import RunSpec
from webagent.stream import SETUP_FAILED
from webagent.tasks import TaskSpec

from .test_runner import lines_of, make_config_stub, wait_for

Plan = str  # "ok", "fail", "crash", "crash_result", "crash_at_open", "crash_later_result", "error", "stall",
# "stubborn", "busy", "quiet", "hang", "slow_close", "lost", "lost_close", "infra_setup", "infra_result",
# "infra_later", "setup_crash", "setup_crash_result"
#: What a browser that did not answer setting the session up says (the issue's overloaded machine).
SETUP_TIMEOUT = (
    "cannot set up the navigation policy: installing the navigation guard: no answer from the browser within 30 s"
)
#: What a renderer that died while the session was set up says (issue 43's batch with renderers killed).
SETUP_CRASH = "cannot set up the navigation policy: Page.enable: Target crashed"
NO_SCREENSHOT = "the page gives no screenshot (none within 10 s, twice) at http://example.test/page?id=17"
NO_ANSWER = "the browser answers nothing: no screenshot within 30 s, and a probe got no answer within 5 s either"
#: A page whose renderer kept dying: past what the session recovers from by reopening it (its browser alive).
CRASHED_AGAIN = "the page crashed 4 times (its renderer process died) at http://example.test/; giving up"


class FakeSession:
    def __init__(self, crashed: bool) -> None:
        self.crashed = crashed

    async def confirm_browser_crash(self) -> bool:
        return self.crashed


class FakeStream:
    """One scripted run (the part of RunStream the batch runner uses)."""

    def __init__(self, agent: FakeAgent, plan: Plan, goal: str, directory: Path) -> None:
        self.agent, self.plan, self.goal, self.directory = agent, plan, goal, directory
        self.result: RunResult | None = None
        self.session: FakeSession | None = None
        self.last_progress = time.monotonic()
        self.queued = False
        self.private = False  # its run directory: the umask's (a run holding a secret: its owner's only)
        self.stepping = False  # the first step has begun (RunStream.stepping)
        self.error: WebAgentError | None = None  # what ended the run (RunStream.error)
        self._gen = self._run()

    @property
    def browser_lost(self) -> bool:
        return self.session is not None and self.session.crashed

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Step:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        await self._gen.aclose()

    async def fence(self, timeout_s: float) -> bool:  # RunStream.fence: it writes its lines itself, at once
        return True

    def _step(self, index: int) -> Step:
        self.stepping = True
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / "trajectory.jsonl").open("a") as fh:
            fh.write(json.dumps({"index": index, "plan": self.plan}) + "\n")
        self.last_progress = time.monotonic()
        call = ModelCall(role="policy", model="m", usage=RoleUsage(calls=1, prompt_tokens=100, completion_tokens=10))
        return Step(index=index, url="http://example.test/", timings=Timings(total_s=0.01), calls=[call])

    def _end(self, success: bool, stop_reason: str = "answered", message: str = "", steps: int = 2) -> None:
        self.result = RunResult(
            success=success,
            answer="42" if success else None,
            stop_reason=stop_reason,  # type: ignore[arg-type]
            message=message,
            url="http://example.test/",
            goal=self.goal,
            steps=steps,
            duration_s=0.1,
            usage=Usage(policy=RoleUsage(calls=steps, prompt_tokens=100, completion_tokens=10)),
        )

    async def _run(self) -> AsyncGenerator[Step, None]:
        plan = self.plan
        if plan == "crash_at_open":  # the pool found no live browser for it: no session
            self.agent.browsers.crashes += 1
            raise BrowserError("cannot open a browser context: Target page, context or browser has been closed")
        if plan == "queued":  # waits its turn to open far longer than the stall limit
            self.queued = True
            await asyncio.sleep(0.6)
            self.queued = False
            self.last_progress = time.monotonic()
        self.session = FakeSession(crashed=plan.startswith("crash") or plan.startswith("lost"))
        self.agent.opened += 1
        try:
            if plan == "infra_setup":  # the session opened; the browser did not answer setting it up
                raise BrowserTimeoutError(SETUP_TIMEOUT)
            if plan == "setup_crash":  # the session opened; its renderer died as the guard was installed
                raise BrowserCrashError(SETUP_CRASH)
            if plan == "setup_crash_result":  # the same, ended as RunStream ends it: a result, not raised
                self.error = BrowserCrashError(SETUP_CRASH)
                self._end(False, "error", SETUP_FAILED + SETUP_CRASH, 0)
                assert self.result is not None
                self.result.infrastructure = True
                return
            yield self._step(1)
            if plan == "infra_later":  # the browser answered nothing after the first step (raised)
                raise BrowserTimeoutError(NO_ANSWER)
            if plan == "crash_later_result":  # the page's renderer kept dying; the browser is alive
                self.error = BrowserCrashError(CRASHED_AGAIN)
                self._end(False, "error", CRASHED_AGAIN, 1)
                assert self.result is not None
                self.result.infrastructure = True
                return
            if plan == "fail":  # the task's own failure: its answers were not accepted
                yield self._step(2)
                self._end(False, "max_steps", "stopped after 2 steps; no answer was accepted")
                return
            if plan == "infra_result":  # the episode ended: no screenshot came, even after the page was reopened
                self._end(False, "error", NO_SCREENSHOT, 1)
                assert self.result is not None
                self.result.infrastructure = True
                return
            if plan in ("crash", "error"):
                raise BrowserError("the browser is gone: Mouse.move: Target page, context or browser has been closed")
            if plan == "crash_result":
                self._end(
                    False, "error", "cannot take a screenshot: Target page, context or browser has been closed", 1
                )
                return
            if plan in ("stall", "stubborn"):
                await self._hang()
            if plan == "busy":  # no step for a while, but model calls keep being answered
                for _ in range(8):
                    await asyncio.sleep(0.05)
                    self.last_progress = time.monotonic()
            if plan == "quiet":  # no sign of progress for a while (a watchdog turned off lets it finish)
                await asyncio.sleep(0.4)
            if plan in ("hang", "lost"):  # "lost": its browser is gone, and it waits on it all the same
                await asyncio.Event().wait()
            if plan == "lost_close":  # the episode fails as its browser dies; closing waits on that browser
                self._end(
                    False, "error", "cannot take a screenshot: Target page, context or browser has been closed", 1
                )
                return
            yield self._step(2)
            self._end(True)
        finally:
            if plan in ("slow_close", "lost_close") and self.result is not None:  # the episode ended; closing hangs
                self.last_progress = time.monotonic()
                await asyncio.Event().wait()
            self.agent.closed += 1  # the session's context closes

    async def _hang(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if self.plan == "stubborn":  # its cleanup hangs, until cancelled once more
                await asyncio.Event().wait()
            raise


class FakePool:
    def __init__(self) -> None:
        self.crashes = 0

    async def start(self, *, hardened: bool = False) -> None:  # as BrowserPool.start
        pass


class FakeAgent:
    """Runs play the next plan of their task (found by the goal)."""

    def __init__(self, plans: dict[str, list[Plan]]) -> None:
        self.plans = plans
        self.config = make_config_stub()
        self.browsers = FakePool()
        self.opened = 0
        self.closed = 0
        self.played: dict[str, list[Plan]] = defaultdict(list)

    @property
    def runtime(self) -> FakeAgent:
        return self  # what the batch asks of the runtime: where secrets may be typed

    def secret_hosts(self, start_url: str | None = None) -> tuple[str, ...]:
        return ()

    def start(self, spec: RunSpec) -> FakeStream:
        plan = self.plans[spec.goal].pop(0)
        self.played[spec.goal].append(plan)
        assert spec.output_dir is not None
        return FakeStream(self, plan, spec.goal, spec.output_dir)

    async def aclose(self) -> None:
        pass


def fake_runner(
    monkeypatch: pytest.MonkeyPatch, out: Path, plans: dict[str, list[Plan]], **options: Any
) -> tuple[BatchRunner, FakeAgent]:
    agent = FakeAgent(plans)
    monkeypatch.setattr("webagent.batch.runner.Agent", lambda config: agent)
    tasks = [TaskSpec(id=goal, url="http://example.test/", goal=goal) for goal in plans]
    options.setdefault("concurrency", len(tasks))
    return BatchRunner(make_config_stub(), tasks, out, **options), agent


def by_id(out: Path) -> dict[str, TaskResult]:
    rows = lines_of(out / "results.jsonl")
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), f"more than one line for a task: {ids}"
    return {r["id"]: TaskResult.model_validate(r) for r in rows}


async def test_a_crashed_run_is_rerun_in_the_same_attempt_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    runner, agent = fake_runner(monkeypatch, out, {"a": ["crash", "ok"], "b": ["crash_result", "ok"], "c": ["ok"]})
    stats = await asyncio.wait_for(runner.run(), 30)
    rows = by_id(out)
    assert sorted(rows) == ["a", "b", "c"]
    for task_id in ("a", "b"):
        r = rows[task_id]
        assert r.success and r.retried and r.attempts == 1, r
        (record,) = r.attempt_records
        assert record.retried and record.output_dir == f"runs/{task_id}/attempt-1"
        assert [rr.reason for rr in record.reruns] == ["browser_crash"]
        assert "closed" in record.reruns[0].message and record.reruns[0].output_dir is None
        assert record.reruns[0].steps == 1 and record.reruns[0].duration_s >= 0
        lines = (out / record.output_dir / "trajectory.jsonl").read_text().splitlines()
        assert [json.loads(line)["plan"] for line in lines] == ["ok", "ok"]  # the crashed run's records are gone
    assert not rows["c"].retried and rows["c"].attempt_records[0].reruns == []
    assert rows["b"].usage.policy.calls == 1 + 2  # the crashed run's model calls are paid for too
    assert (stats.retried, stats.errors, stats.succeeded, stats.stalled) == (2, 0, 3, 0)
    assert agent.opened == agent.closed == 5


async def test_a_browser_that_dies_again_is_replaced_again_within_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    plans = {
        "twice": ["crash", "crash_result", "ok"],
        "always": ["crash", "crash", "crash", "ok"],
        "at-open": ["crash", "crash_at_open", "ok"],
    }
    runner, agent = fake_runner(monkeypatch, out, plans)
    stats = await asyncio.wait_for(runner.run(), 30)
    rows = by_id(out)
    assert rows["twice"].success and rows["at-open"].success
    assert [rr.reason for rr in rows["twice"].attempt_records[0].reruns] == ["browser_crash"] * 2
    assert [rr.steps for rr in rows["at-open"].attempt_records[0].reruns] == [1, 0]
    always = rows["always"]
    assert not always.success and always.stop_reason == "error" and always.retried
    assert agent.played["always"] == ["crash"] * 3  # 1 run + CRASH_RERUNS re-runs, then the error stands
    assert len(always.attempt_records[0].reruns) == CRASH_RERUNS == 2
    assert "browser is gone" in always.message and always.attempt_records[0].steps == 1
    assert stats.errors == 1 and stats.retried == 3


async def test_an_error_that_is_not_a_crash_is_not_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "b"
    runner, agent = fake_runner(monkeypatch, out, {"e": ["error", "ok"]})
    await asyncio.wait_for(runner.run(), 30)
    (r,) = by_id(out).values()
    assert not r.success and r.stop_reason == "error" and not r.retried
    assert agent.played["e"] == ["error"]
    record = r.attempt_records[0]
    assert record.steps == 1 and record.duration_s >= 0 and "browser is gone" in record.message


async def test_crash_reruns_are_per_attempt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "b"
    plans = {"k": ["crash", "error", "crash", "ok"]}
    runner, _ = fake_runner(monkeypatch, out, plans, attempts=2)
    await asyncio.wait_for(runner.run(), 30)
    (r,) = by_id(out).values()
    assert r.success and r.attempts == 2
    first, second = r.attempt_records
    assert [rr.reason for rr in first.reruns] == ["browser_crash"] and first.stop_reason == "error"
    assert [rr.reason for rr in second.reruns] == ["browser_crash"] and second.success
    assert second.output_dir == "runs/k/attempt-2"


async def test_a_run_still_waiting_after_its_browser_died_is_cut_off_and_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "b"
    plans = {"lost": ["lost", "ok"], "crash": ["crash", "ok"], "lost_close": ["lost_close", "ok"], "fine": ["ok"]}
    runner, agent = fake_runner(monkeypatch, out, plans)  # the stall watchdog at its default (300 s)
    runner.browser_lost_grace_s = 0.3
    started = time.monotonic()
    stats = await asyncio.wait_for(runner.run(), 30)
    assert time.monotonic() - started < 10  # cut off after the grace, not at the stall limit
    rows = by_id(out)
    assert all(r.success for r in rows.values()), rows
    lost = rows["lost"]
    (rerun,) = lost.attempt_records[0].reruns
    assert rerun.reason == "browser_crash" and rerun.steps == 1
    assert rerun.message.startswith(
        "the browser disconnected and the run was still waiting 0.3 s later (stuck in step 2: "
    )
    assert "FakeStream._run" in rerun.message, rerun.message  # where it waited
    assert lost.usage.policy.calls == 1 + 2  # what it spent before it was cut off counts
    assert [r.reason for r in rows["crash"].attempt_records[0].reruns] == ["browser_crash"]  # ended by itself
    # An episode that failed as its browser died, its clean-up then stuck on that browser: re-run too.
    assert [r.reason for r in rows["lost_close"].attempt_records[0].reruns] == ["browser_crash"]
    assert stats.stalled == 0 and stats.retried == 3 and stats.errors == 0
    assert agent.opened == agent.closed + 1  # every session closed but the one whose clean-up hung


async def test_a_stalled_run_is_cancelled_kept_and_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "b"
    plans = {"stuck": ["stall", "ok"], "busy": ["busy"], "fine": ["ok"], "queued": ["queued"]}
    runner, agent = fake_runner(monkeypatch, out, plans, stall_timeout_s=0.25)
    stats = await asyncio.wait_for(runner.run(), 30)
    rows = by_id(out)
    assert all(r.success for r in rows.values()), rows
    assert not rows["busy"].retried  # answered model calls are progress, even without a step
    assert not rows["queued"].retried  # waiting for its turn to open is not a stall
    stuck = rows["stuck"]
    assert stuck.retried and stuck.attempts == 1
    record = stuck.attempt_records[0]
    assert not record.stalled and record.output_dir == "runs/stuck/attempt-1"
    (rerun,) = record.reruns
    assert rerun.reason == "stalled" and rerun.steps == 1
    assert rerun.message.startswith("no progress for 0.25 s (stuck in step 2: "), rerun.message
    assert "FakeStream._hang" in rerun.message  # where it waited
    kept = out / str(rerun.output_dir)
    assert rerun.output_dir == "runs/stuck/attempt-1-stalled"
    assert len((kept / "trajectory.jsonl").read_text().splitlines()) == 1  # what it wrote is kept
    written = json.loads((kept / "result.json").read_text())
    assert written["stop_reason"] == "error" and written["message"] == rerun.message and written["steps"] == 1
    assert written["usage"]["policy"]["calls"] == 1  # what it spent before it stalled is kept, and counted
    assert stuck.usage.policy.calls == 1 + 2 and stuck.usage.policy.prompt_tokens == 100 + 100
    assert len((out / record.output_dir / "trajectory.jsonl").read_text().splitlines()) == 2  # the re-run's own
    assert stats.stalled == 1 and stats.retried == 1 and stats.errors == 0
    assert agent.opened == agent.closed  # the cancelled run closed its session
    summary = summarize(read_results(out), stats, runner.config, attempts=1)
    assert summary.stalled == 1 and summary.retried_after_crash == 0


async def test_a_run_whose_clean_up_stalls_keeps_its_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "b"
    runner, agent = fake_runner(monkeypatch, out, {"done": ["slow_close", "ok"]}, stall_timeout_s=0.2)
    stats = await asyncio.wait_for(runner.run(), 30)
    row = by_id(out)["done"]
    assert row.success and row.answer == "42" and not row.retried, row  # not thrown away, not re-run
    assert agent.played["done"] == ["slow_close"]
    assert stats.stalled == 0 and row.usage.policy.calls == 2  # its model calls still count
    assert json.loads((out / "runs/done/attempt-1/result.json").read_text())["success"]


async def test_a_run_that_stalls_again_ends_with_the_stall(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "b"
    runner, agent = fake_runner(monkeypatch, out, {"stuck": ["stall", "stubborn", "ok"]}, stall_timeout_s=0.2)
    runner.cleanup_timeout_s = 0.2  # the stubborn run's cleanup hangs until cancelled a second time
    stats = await asyncio.wait_for(runner.run(), 30)
    (r,) = by_id(out).values()
    assert agent.played["stuck"] == ["stall", "stubborn"]  # re-run once, not twice
    assert not r.success and r.stop_reason == "error" and r.retried
    assert r.message.startswith("no progress for 0.2 s (stuck in step 2: ")
    record = r.attempt_records[0]
    assert record.stalled and [rr.reason for rr in record.reruns] == ["stalled"]
    assert json.loads((out / record.output_dir / "result.json").read_text())["message"] == r.message
    assert (out / "runs/stuck/attempt-1-stalled/result.json").exists()
    assert stats.errors == 1 and stats.stalled == 2
    assert agent.opened == agent.closed == 2


async def test_the_watchdog_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "b"
    runner, _ = fake_runner(monkeypatch, out, {"q": ["quiet"]}, stall_timeout_s=0)
    await asyncio.wait_for(runner.run(), 30)
    (r,) = by_id(out).values()
    assert r.success and not r.retried
    with pytest.raises(ValueError, match="stall_timeout_s"):
        BatchRunner(make_config_stub(), [], tmp_path, stall_timeout_s=-1)


async def test_stop_abandons_a_run_under_the_watchdog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "b"
    runner, agent = fake_runner(monkeypatch, out, {"h": ["hang"], "ok": ["ok"]}, stall_timeout_s=60)
    running = asyncio.create_task(runner.run())
    await wait_for(lambda: runner.stats.done == 1 and agent.opened == 2, 10, "the quick task")
    runner.stop()
    stats = await asyncio.wait_for(running, 30)
    assert list(by_id(out)) == ["ok"]  # the abandoned task has no line: it runs again on resume
    assert stats.in_flight == 0 and agent.closed == 2
