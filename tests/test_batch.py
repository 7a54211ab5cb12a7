"""The batch runner (library level): real Chromium, the offline model server, the local sites; and
with fakes (no browser): crash re-runs, the watchdog, the browser pool's replacements."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from collections import defaultdict
from collections.abc import AsyncGenerator, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.async_api import async_playwright

from webagent.batch import CRASH_RERUNS, BatchRunner, BatchStats, ResultsFile, TaskResult, cost_of, read_results
from webagent.batchcli import EXIT_DONE, EXIT_ERRORS, EXIT_INTERRUPTED, exit_code
from webagent.browser.launcher import launch_browser
from webagent.browser.pool import LAUNCH_TRIES, BrowserPool
from webagent.browser.session import BrowserSession
from webagent.config import BrowserConfig
from webagent.errors import BrowserError, NavigationError
from webagent.prompts import resource_dir
from webagent.records import RoleUsage, RunResult, Step, Timings, Usage
from webagent.summary import summarize
from webagent.tasks import TaskSpec, load_tasks
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from .conftest import load_task_script, make_config

F = TypeVar("F", bound=Callable[..., Any])


def real_browser(test: F) -> F:
    """End to end: real Chromium, the offline model server, the local sites."""
    marked: F = pytest.mark.e2e(pytest.mark.browser(test))
    return marked


LOCAL_IDS = ["catalog-price", "catalog-feedback", "form-register", "longpage-code", "tabs-order"]
LOCAL_STEPS = {"catalog-price": 3, "catalog-feedback": 4, "form-register": 6, "longpage-code": 6, "tabs-order": 2}
LOCAL_ANSWERS = {
    "catalog-price": "$12.50",
    "catalog-feedback": "$19.99",
    "form-register": "REF-AL-CA",
    "longpage-code": "4711-ZETA",
    "tabs-order": "ORD-58213",
}


def local_lines(site: SiteServer) -> dict[str, dict[str, Any]]:
    text = (resource_dir("tasks") / "local.jsonl").read_text(encoding="utf-8").replace("{base}", site.url)
    return {t["id"]: t for t in map(json.loads, filter(str.strip, text.splitlines()))}


def task_file(path: Path, tasks: list[dict[str, Any]]) -> list[TaskSpec]:
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    return load_tasks(path)


def slow_copies(site: SiteServer, *ids: str) -> list[dict[str, Any]]:
    """Copies of the longpage task (six steps) under other ids."""
    base = local_lines(site)["longpage-code"]
    return [{**base, "id": task_id} for task_id in ids]


def lines_of(path: Path) -> list[dict[str, Any]]:
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), "results.jsonl must end with a complete line"
    return [json.loads(line) for line in data.decode().splitlines()]


def total_requests(server: FakeModelServer) -> int:
    return sum(server.request_counts.values())


def step_lines(run_dir: Path) -> int:
    path = run_dir / "trajectory.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


# ---------------------------------------------------------------- processes started by this test


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree[ppid].append(int(entry))
    return tree


def descendants(root: int) -> list[int]:
    tree, found, todo = _children(), [], [root]
    while todo:
        for child in tree.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def chromium_mains(root: int) -> set[int]:
    """Main Chromium browser processes below ``root`` (not its zygotes, renderers, utilities)."""
    mains = set()
    for pid in descendants(root):
        args = cmdline(pid)
        # Chromium's helpers rewrite their command line into one string: look at all of it.
        if args and "chrom" in Path(args[0].split(" ")[0]).name and "--type=" not in " ".join(args):
            mains.add(pid)
    return mains


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def wait_for(predicate: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------- the five local tasks, resume


@real_browser
async def test_batch_of_local_tasks_then_resume(site: SiteServer, tmp_path: Path) -> None:
    tasks = task_file(tmp_path / "local.jsonl", list(local_lines(site).values()))
    out = tmp_path / "batch"
    updates: list[tuple[int, int]] = []
    async with FakeModelServer(load_task_script("local")) as server:
        config = make_config(server)
        config.policy.price_prompt_per_m = 1.0
        config.validator.price_completion_per_m = 3.0
        runner = BatchRunner(
            config, tasks, out, concurrency=3, on_update=lambda s: updates.append((s.done, s.in_flight))
        )
        stats = await runner.run()

        rows = lines_of(out / "results.jsonl")
        assert len(rows) == 5
        assert sorted(r["id"] for r in rows) == sorted(LOCAL_IDS)
        results = {r["id"]: TaskResult.model_validate(r) for r in rows}
        for task_id, r in results.items():
            assert r.success, (task_id, r.message)
            assert r.answer == LOCAL_ANSWERS[task_id]
            assert r.stop_reason == "answered" and r.attempts == 1 and not r.retried
            assert r.steps == LOCAL_STEPS[task_id]
            assert r.reference == [] and r.reference_match is None
            assert len(r.attempt_records) == 1
            record = r.attempt_records[0]
            assert record.attempt == 1 and record.success and record.steps == r.steps
            run_dir = out / record.output_dir
            assert run_dir.is_dir() and run_dir.is_relative_to(out / "runs")
            result_json = json.loads((run_dir / "result.json").read_text())
            assert result_json["success"] is True and result_json["answer"] == r.answer
            assert (run_dir / "report.html").stat().st_size > 1000
            assert step_lines(run_dir) == r.steps
            assert r.usage.model_dump() == result_json["usage"]  # one attempt: its usage is the task's
            assert r.usage.policy.calls == r.steps
            assert r.cost_usd == round(cost_of(r.usage, config), 6)
            assert r.cost_usd == round(
                r.usage.policy.prompt_tokens / 1e6 + r.usage.validator.completion_tokens * 3 / 1e6, 6
            )
            assert r.cost_usd > 0
        ids_in_dirs = {r.attempt_records[0].output_dir.split("/")[1] for r in results.values()}
        assert len(ids_in_dirs) == 5

        assert isinstance(stats, BatchStats)
        assert (stats.total, stats.done, stats.resumed, stats.finished_now) == (5, 5, 0, 5)
        assert (stats.succeeded, stats.errors, stats.retried, stats.in_flight) == (5, 0, 0, 0)
        assert stats.steps == sum(LOCAL_STEPS.values()) == 21
        assert len(stats.step_total_s) == len(stats.step_model_s) == len(stats.step_browser_s) == 21
        assert stats.tokens == sum(
            u.prompt_tokens + u.completion_tokens
            for r in results.values()
            for u in (r.usage.policy, r.usage.localizer, r.usage.validator)
        )
        assert updates and updates[-1] == (5, 0)
        assert max(f for _, f in updates) <= 3  # never more than the concurrency in flight
        assert max(f for _, f in updates) >= 2  # ... and it did run tasks at once

        # Resume: the same command again does nothing.
        before_bytes = (out / "results.jsonl").read_bytes()
        before_requests = total_requests(server)
        again = BatchRunner(config, tasks, out, concurrency=3)
        stats2 = await again.run()
        assert (stats2.resumed, stats2.finished_now, stats2.done, stats2.total, stats2.steps) == (5, 0, 5, 5, 0)
        assert total_requests(server) == before_requests
        assert (out / "results.jsonl").read_bytes() == before_bytes
        for r in results.values():  # finished tasks' run directories are left alone
            assert (out / r.attempt_records[0].output_dir / "result.json").exists()

        summary = summarize(read_results(out), stats2, config, attempts=1)
        assert summary["finished"] == 5 and summary["success_rate"] == 1.0
        assert summary["run"]["tasks_resumed"] == 5 and summary["run"]["tasks_finished"] == 0


def hand_made_result(task_id: str, url: str = "https://example.com", goal: str = "g") -> TaskResult:
    return TaskResult.model_validate(
        {
            "id": task_id,
            "url": url,
            "goal": goal,
            "success": True,
            "answer": "x",
            "stop_reason": "answered",
            "message": "",
            "attempts": 1,
            "attempt_records": [],
            "steps": 1,
            "usage": {},
            "cost_usd": 0.0,
            "duration_s": 0.1,
            "retried": False,
        }
    )


@real_browser
async def test_torn_last_line_is_dropped_on_resume(site: SiteServer, tmp_path: Path) -> None:
    local = local_lines(site)
    tasks = task_file(tmp_path / "t.jsonl", [local["tabs-order"], local["catalog-price"]])
    out = tmp_path / "batch"
    results = out / "results.jsonl"
    out.mkdir()
    good = (hand_made_result("tabs-order", tasks[0].url, tasks[0].goal).model_dump_json() + "\n").encode()
    results.write_bytes(good + b'{"id": "catalog-price", "succ')  # a crash in the middle of a write
    async with FakeModelServer(load_task_script("local")) as server:
        stats = await BatchRunner(make_config(server), tasks, out, concurrency=2).run()
        assert stats.resumed == 1 and stats.finished_now == 1 and stats.succeeded == 1
        assert {r.task for r in server.requests if r.role != "localizer"} == {"catalog-price"}
    data = results.read_bytes()
    assert data.startswith(good)  # the good line is intact, the torn tail gone
    assert b'"succ{' not in data and data.count(b'"id":"catalog-price"') == 1
    rows = lines_of(results)
    assert [r["id"] for r in rows] == ["tabs-order", "catalog-price"]
    assert rows[1]["success"] is True and rows[1]["answer"] == "$12.50"


def test_results_file_repair_and_atomic_lines(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"partial')  # nothing but a torn line
    rf = ResultsFile(path)
    assert path.read_bytes() == b"" and rf.finished() == {}
    rf.append(hand_made_result("a"))
    rf.append(hand_made_result("b"))
    rf.close()
    assert path.read_text().count("\n") == 2
    assert list(ResultsFile(path).finished()) == ["a", "b"]


def test_runner_rejects_bad_counts(tmp_path: Path) -> None:
    spec = TaskSpec(id="a", url="https://example.com", goal="g")
    with pytest.raises(ValueError, match="at least 1"):
        BatchRunner(make_config_stub(), [spec], tmp_path, concurrency=0)
    with pytest.raises(ValueError, match="at least 1"):
        BatchRunner(make_config_stub(), [spec], tmp_path, attempts=0)


def make_config_stub() -> Any:
    from webagent.demo import offline_config

    return offline_config("http://127.0.0.1:9", "holo1.5")


@real_browser
async def test_an_unexpected_error_in_a_task_is_not_silently_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug inside one task must not make the batch end "normally" with tasks neither run nor reported."""

    def broken_stream(self: Any, url: str, goal: str, **kwargs: Any) -> Any:
        raise RuntimeError("boom: an unexpected bug")

    monkeypatch.setattr("webagent.batch.Agent.stream", broken_stream)
    tasks = [TaskSpec(id=i, url="http://127.0.0.1:9/", goal="g") for i in ("a", "b")]
    out = tmp_path / "batch"
    runner = BatchRunner(make_config_stub(), tasks, out, concurrency=1)
    try:
        stats = await asyncio.wait_for(runner.run(), 30)
    except RuntimeError as exc:  # propagating the bug is fine
        assert "boom" in str(exc)
        return
    # ... and so is recording it per task; silently returning with neither is not.
    rows = read_results(out)
    assert sorted(r.id for r in rows) == ["a", "b"], f"tasks lost without a trace (done {stats.done}/{stats.total})"
    assert all(r.stop_reason == "error" and "boom" in r.message for r in rows)
    assert stats.done == stats.total == 2 and stats.errors == 2


async def test_a_run_that_cannot_start_leaves_no_signal_handlers(tmp_path: Path) -> None:
    from webagent.config import AgentConfig
    from webagent.errors import ConfigError

    runner = BatchRunner(AgentConfig(), [TaskSpec(id="a", url="http://127.0.0.1:9/", goal="g")], tmp_path / "b")
    with pytest.raises(ConfigError, match="no base url configured"):
        await runner.run()
    loop = asyncio.get_running_loop()
    left = [sig.name for sig in (signal.SIGINT, signal.SIGTERM) if loop.remove_signal_handler(sig)]
    assert left == [], f"run() failed but left its {left} handlers on the event loop (Ctrl-C would be ignored)"


# ---------------------------------------------------------------- pass@k and references

PASS_AT_K_SCRIPT: dict[str, Any] = {
    "tasks": [
        {
            "id": "never",
            "match": "never accepted",
            "policy": [{"action": {"action": "answer", "content": "wrong"}}],
            "validator": {"accept": ["right"], "feedback": "No."},
        },
        {
            "id": "easy",
            "match": "easily accepted",
            "policy": [{"action": {"action": "answer", "content": "Right, 42"}}],
            "validator": {"accept": ["42"]},
        },
    ]
}


def pass_at_k_tasks(site: SiteServer) -> list[dict[str, Any]]:
    url = site.url + "/catalog/"
    return [
        {"id": "never", "url": url, "goal": "A goal that is never accepted"},
        {"id": "easy", "url": url, "goal": "A goal that is easily accepted"},
        {"id": "easy-ref", "url": url, "goal": "Another goal, easily accepted", "reference": "43"},
    ]


@real_browser
async def test_pass_at_k_and_references(site: SiteServer, tmp_path: Path) -> None:
    tasks = task_file(tmp_path / "t.jsonl", pass_at_k_tasks(site))
    async with FakeModelServer(PASS_AT_K_SCRIPT) as server:
        config = make_config(server, max_attempts=1)
        refs = {"never": ["right"], "easy": ["  RIGHT,   42 "]}
        stats = await BatchRunner(config, tasks, tmp_path / "k", concurrency=3, attempts=3, references=refs).run()
        rows = {r.id: r for r in read_results(tmp_path / "k")}
        validator_calls = server.request_counts["validator"]

        never = rows["never"]
        assert never.success is False and never.attempts == 3 and len(never.attempt_records) == 3
        assert [a.attempt for a in never.attempt_records] == [1, 2, 3]
        assert not any(a.success for a in never.attempt_records)
        assert never.answer == "wrong" and never.steps == 3
        assert [a.output_dir for a in never.attempt_records] == [f"runs/never/attempt-{k}" for k in (1, 2, 3)]
        for a in never.attempt_records:
            assert (tmp_path / "k" / a.output_dir / "result.json").exists()
        assert never.usage.validator.calls == 3  # usage adds up over the attempts
        assert never.reference == ["right"] and never.reference_match is False

        easy = rows["easy"]
        assert easy.success is True and easy.attempts == 1 and len(easy.attempt_records) == 1
        assert not (tmp_path / "k" / "runs" / "easy" / "attempt-2").exists()
        assert easy.reference_match is True  # case- and space-insensitive

        easy_ref = rows["easy-ref"]  # no entry in references: the task's own reference is used
        assert easy_ref.success is True and easy_ref.reference == ["43"] and easy_ref.reference_match is False

        assert validator_calls == 3 + 1 + 1
        assert stats.succeeded == 2 and stats.finished_now == 3
        summary = summarize(read_results(tmp_path / "k"), stats, config, attempts=3)
        assert summary["attempts_per_task"] == round(5 / 3, 3)
        assert summary["reference"] == {"scored": 3, "matched": 1, "match_rate": 0.333}

        # --sample-all: every attempt runs even after a success.
        server.reset()
        stats = await BatchRunner(config, tasks[1:2], tmp_path / "all", attempts=3, sample_all=True).run()
        (easy_all,) = read_results(tmp_path / "all")
        assert easy_all.success is True and easy_all.attempts == 3
        assert [a.success for a in easy_all.attempt_records] == [True, True, True]
        assert server.request_counts["validator"] == 3 and easy_all.usage.validator.calls == 3
        assert easy_all.reference_match is None


# ---------------------------------------------------------------- a browser crash mid-task


@real_browser
async def test_a_browser_killed_while_the_first_page_opens_is_a_crash(tmp_path: Path) -> None:
    """Not a NavigationError blamed on the site: the batch must see the crash and re-run the task."""
    arrived = threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            arrived.set()
            time.sleep(3)
            with contextlib.suppress(OSError):
                self.send_response(200)
                self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    me = os.getpid()
    before = chromium_mains(me)
    config = BrowserConfig()
    try:
        async with async_playwright() as pw:
            browser = await launch_browser(pw, config)
            session = await BrowserSession.create(browser, config)
            (pid,) = chromium_mains(me) - before
            helpers = [(p, cmdline(p)) for p in descendants(pid)]
            opening = asyncio.create_task(session.goto(f"http://127.0.0.1:{server.server_port}/", start=True))
            assert await asyncio.to_thread(arrived.wait, 10)
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(BrowserError) as info:
                await opening
            assert not isinstance(info.value, NavigationError)
            assert await session.confirm_browser_crash()
    finally:
        server.shutdown()
        server.server_close()
        await asyncio.sleep(0.5)
        for p, args in helpers:
            if alive(p) and cmdline(p) == args:
                os.kill(p, signal.SIGKILL)


@real_browser
async def test_browser_crash_is_retried(site: SiteServer, tmp_path: Path) -> None:
    script = {**load_task_script("local"), "latency_s": {"policy": 0.25}}
    tasks = task_file(tmp_path / "t.jsonl", slow_copies(site, "slow-a", "slow-b"))
    out = tmp_path / "batch"
    me = os.getpid()
    before = chromium_mains(me)  # e.g. the session's shared browser: never touched
    killed: list[int] = []
    helpers: list[tuple[int, list[str]]] = []

    def first_step_written() -> bool:
        return any(step_lines(p.parent) >= 1 for p in out.glob("runs/*/attempt-1/trajectory.jsonl"))

    async def crash_it() -> None:
        await wait_for(first_step_written, 30, "the first step record")
        ours = chromium_mains(me) - before
        assert len(ours) == 1, f"expected one Chromium launched by the batch, found {ours}"
        (pid,) = ours
        helpers.extend((p, cmdline(p)) for p in descendants(pid))  # its zygotes, renderers, utilities
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    async with FakeModelServer(script) as server:
        config = make_config(server)
        runner = BatchRunner(config, tasks, out, concurrency=2)
        crasher = asyncio.create_task(crash_it())
        try:
            stats = await asyncio.wait_for(runner.run(), 60)
            await crasher
        finally:
            crasher.cancel()
            await asyncio.sleep(0.5)  # helpers of the killed browser exit on their own...
            for pid, args in helpers:  # ... any left (still the same process) are ended here
                if alive(pid) and cmdline(pid) == args:
                    os.kill(pid, signal.SIGKILL)
    assert killed
    rows = {r.id: r for r in read_results(out)}
    assert sorted(rows) == ["slow-a", "slow-b"]
    for r in rows.values():
        assert r.success, r.message
        assert r.answer == "4711-ZETA"
        assert r.retried is True  # both were in flight on the killed browser
        assert r.attempts == 1 and r.attempt_records[0].retried is True
        assert [rr.reason for rr in r.attempt_records[0].reruns] == ["browser_crash"]
        assert r.steps == 6  # the steps of the attempt that counted
        assert step_lines(out / r.attempt_records[0].output_dir) == 6  # the crashed attempt's records are gone
    assert stats.retried == 2 and stats.succeeded == 2 and stats.errors == 0
    summary = summarize(read_results(out), stats, config, attempts=1)
    assert summary["retried_after_crash"] == 2 and summary["success_rate"] == 1.0
    assert chromium_mains(me) - before == set()  # the replacement browser was closed at the end


# ---------------------------------------------------------------- stop (SIGINT/SIGTERM) and resume


@real_browser
async def test_stop_abandons_in_flight_tasks_and_resume_finishes(site: SiteServer, tmp_path: Path) -> None:
    script = {**load_task_script("local"), "latency_s": {"policy": 0.2}}
    local = local_lines(site)
    specs = [local["tabs-order"], *slow_copies(site, "slow-1", "slow-2", "slow-3", "slow-4")]
    tasks = task_file(tmp_path / "t.jsonl", specs)
    out = tmp_path / "batch"
    results = out / "results.jsonl"
    me = os.getpid()
    before = chromium_mains(me)

    async with FakeModelServer(script) as server:
        config = make_config(server)
        runner = BatchRunner(config, tasks, out, concurrency=2)

        requests_at_stop: list[int] = []

        async def stop_soon() -> None:
            await wait_for(lambda: results.exists() and results.stat().st_size > 0, 30, "a finished task")
            await asyncio.sleep(0.2)
            requests_at_stop.append(server.request_counts["policy"])
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C does: the runner's handler stops it

        stopper = asyncio.create_task(stop_soon())
        stats = await asyncio.wait_for(runner.run(), 30)
        await stopper
        assert runner.stopping
        rows = lines_of(results)
        ids = [r["id"] for r in rows]
        assert "tabs-order" in ids and len(ids) < 5
        assert len(ids) == len(set(ids)) == stats.finished_now == stats.done
        assert all(r["success"] for r in rows)
        assert stats.in_flight == 0
        # The in-flight tasks were abandoned, not finished: at most the requests already on the wire arrive.
        assert server.request_counts["policy"] <= requests_at_stop[0] + 2
        await wait_for(lambda: not (chromium_mains(me) - before), 10, "the batch's Chromium to exit")

        # Resume: the rest runs, nothing twice.
        stats2 = await asyncio.wait_for(BatchRunner(config, tasks, out, concurrency=4).run(), 60)
    rows2 = lines_of(results)
    ids2 = [r["id"] for r in rows2]
    assert ids2[: len(ids)] == ids  # the first run's lines are untouched
    assert sorted(ids2) == sorted(t.id for t in tasks)
    assert stats2.resumed == len(ids) and stats2.finished_now == 5 - len(ids)
    for r in rows2:
        assert r["success"] and r["retried"] is False
        run_dir = out / r["attempt_records"][0]["output_dir"]
        assert step_lines(run_dir) == r["steps"]  # a rerun task starts from a clean directory


# ---------------------------------------------------------------- fakes: crash re-runs and the watchdog
#
# A fake Agent whose streams play scripted runs: the runner's own logic (re-runs, the watchdog,
# records, one line per task) without a browser or a model server.

Plan = str  # "ok", "crash", "crash_result", "crash_at_open", "error", "stall", "stubborn", "busy", "quiet", "hang",
# "slow_close"


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
        self._gen = self._run()

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> Step:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        await self._gen.aclose()

    def _step(self, index: int) -> Step:
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / "trajectory.jsonl").open("a") as fh:
            fh.write(json.dumps({"index": index, "plan": self.plan}) + "\n")
        self.last_progress = time.monotonic()
        return Step(index=index, url="http://example.test/", timings=Timings(total_s=0.01))

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
        self.session = FakeSession(crashed=plan.startswith("crash"))
        self.agent.opened += 1
        try:
            yield self._step(1)
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
            if plan == "hang":
                await asyncio.Event().wait()
            yield self._step(2)
            self._end(True)
        finally:
            if plan == "slow_close" and self.result is not None:  # the episode ended; closing hangs
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

    async def start(self) -> None:
        pass


class FakeAgent:
    """Streams play the next plan of their task (found by the goal)."""

    def __init__(self, plans: dict[str, list[Plan]]) -> None:
        self.plans = plans
        self.browsers = FakePool()
        self.opened = 0
        self.closed = 0
        self.played: dict[str, list[Plan]] = defaultdict(list)

    def stream(self, url: str, goal: str, *, output_dir: Path) -> FakeStream:
        plan = self.plans[goal].pop(0)
        self.played[goal].append(plan)
        return FakeStream(self, plan, goal, Path(output_dir))

    async def aclose(self) -> None:
        pass


def fake_runner(
    monkeypatch: pytest.MonkeyPatch, out: Path, plans: dict[str, list[Plan]], **options: Any
) -> tuple[BatchRunner, FakeAgent]:
    agent = FakeAgent(plans)
    monkeypatch.setattr("webagent.batch.Agent", lambda config: agent)
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


async def test_a_stalled_run_is_cancelled_kept_and_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "b"
    plans = {"stuck": ["stall", "ok"], "busy": ["busy"], "fine": ["ok"]}
    runner, agent = fake_runner(monkeypatch, out, plans, stall_timeout_s=0.25)
    stats = await asyncio.wait_for(runner.run(), 30)
    rows = by_id(out)
    assert all(r.success for r in rows.values()), rows
    assert not rows["busy"].retried  # answered model calls are progress, even without a step
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
    assert len((out / record.output_dir / "trajectory.jsonl").read_text().splitlines()) == 2  # the re-run's own
    assert stats.stalled == 1 and stats.retried == 1 and stats.errors == 0
    assert agent.opened == agent.closed  # the cancelled run closed its session
    summary = summarize(read_results(out), stats, runner.config, attempts=1)
    assert summary["stalled"] == 1 and summary["retried_after_crash"] == 0


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


def test_exit_codes() -> None:
    base = {"interrupted": False, "errors": 0, "tasks": 4, "finished": 4}
    assert exit_code(base) == EXIT_DONE == 0
    assert exit_code({**base, "errors": 3}) == EXIT_ERRORS == 1
    assert exit_code({**base, "finished": 3}) == EXIT_ERRORS  # a task without its result line
    assert exit_code({**base, "interrupted": True, "errors": 3}) == EXIT_INTERRUPTED == 130
    assert len({EXIT_DONE, EXIT_ERRORS, EXIT_INTERRUPTED, 2}) == 4  # 2: usage errors (webagent.cli)


# ---------------------------------------------------------------- fakes: the browser pool


class FakeBrowser:
    def __init__(self, number: int) -> None:
        self.number = number
        self.connected = True
        self.closed = False
        self._handlers: list[Callable[[Any], None]] = []

    def on(self, event: str, handler: Callable[[Any], None]) -> None:
        assert event == "disconnected"
        self._handlers.append(handler)

    def is_connected(self) -> bool:
        return self.connected

    def die(self) -> None:
        if self.connected:
            self.connected = False
            for handler in list(self._handlers):
                handler(self)

    async def close(self) -> None:
        self.closed = True
        self.die()


class FakeContextSession:
    def __init__(self, browser: FakeBrowser) -> None:
        self.browser = browser
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class FakeLauncher:
    """Stands in for Playwright and ``open_browser``; ``fail_launches`` launches fail first."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.browsers: list[FakeBrowser] = []
        self.fail_launches = 0
        self.unusable: set[int] = set()  # browsers on which a context cannot be opened
        self.late_disconnect_s: float | None = None  # ... because they die, reported this much later

        class FakePlaywright:
            async def stop(self) -> None:
                pass

        class Starter:
            async def start(self) -> FakePlaywright:
                return FakePlaywright()

        monkeypatch.setattr("webagent.browser.pool.async_playwright", lambda: Starter())
        monkeypatch.setattr("webagent.browser.pool.open_browser", self.open_browser)
        monkeypatch.setattr("webagent.browser.pool.BrowserSession.create", self.create)

    async def open_browser(self, playwright: Any, config: BrowserConfig) -> FakeBrowser:
        if self.fail_launches:
            self.fail_launches -= 1
            raise BrowserError("cannot launch Chromium: Failed to launch the browser process")
        browser = FakeBrowser(len(self.browsers) + 1)
        self.browsers.append(browser)
        return browser

    async def create(self, browser: FakeBrowser, config: BrowserConfig, **_: Any) -> FakeContextSession:
        if browser.number in self.unusable or not browser.connected:
            if self.late_disconnect_s is not None:
                asyncio.get_running_loop().call_later(self.late_disconnect_s, browser.die)
            raise BrowserError("cannot open a browser context: Target page, context or browser has been closed")
        return FakeContextSession(browser)


async def test_pool_replaces_a_dead_browser_and_never_hands_it_out(monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = FakeLauncher(monkeypatch)
    pool = BrowserPool(BrowserConfig())
    await pool.start()
    async with pool.session() as first:
        assert first.browser.number == 1  # type: ignore[attr-defined]
        launcher.browsers[0].die()
        async with pool.session() as second:
            assert second.browser.number == 2  # type: ignore[attr-defined]
        assert pool.crashes == 1 and pool.browsers == 1
    assert launcher.browsers[0].closed  # the dead one is closed (and dropped) once its last session ended
    async with pool.session() as third:
        assert third.browser.number == 2  # type: ignore[attr-defined]
    launcher.browsers[1].die()
    async with pool.session() as fourth:  # a replacement that dies is replaced again
        assert fourth.browser.number == 3  # type: ignore[attr-defined]
    await pool.aclose()
    assert pool.crashes == 2 and pool.launched == 3


async def test_pool_waits_for_a_disconnect_reported_late(monkeypatch: pytest.MonkeyPatch) -> None:
    """A context that cannot be opened on a browser that is dying (the driver has not said so yet) is
    opened on a replacement, not reported as the task's error."""
    launcher = FakeLauncher(monkeypatch)
    pool = BrowserPool(BrowserConfig())
    await pool.start()
    launcher.unusable.add(1)
    launcher.late_disconnect_s = 0.05
    async with pool.session() as session:
        assert session.browser.number == 2  # type: ignore[attr-defined]
    assert pool.crashes == 1
    await pool.aclose()


async def test_pool_raises_a_session_error_of_a_live_browser(monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = FakeLauncher(monkeypatch)
    pool = BrowserPool(BrowserConfig())
    pool.disconnect_wait_s = 0.05
    await pool.start()
    launcher.unusable.add(1)  # it stays connected: not a crash, the error stands
    with pytest.raises(BrowserError, match="cannot open a browser context"):
        async with pool.session():
            pass
    assert pool.crashes == 0 and len(launcher.browsers) == 1
    await pool.aclose()


async def test_pool_retries_the_launch_of_a_replacement(monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = FakeLauncher(monkeypatch)
    monkeypatch.setattr("webagent.browser.pool._LAUNCH_RETRY_S", 0.01)
    launcher.fail_launches = 1
    pool = BrowserPool(BrowserConfig())
    with pytest.raises(BrowserError, match="cannot launch"):  # the first launch: one error up front
        await pool.start()
    await pool.start()
    launcher.browsers[0].die()
    assert LAUNCH_TRIES > 1
    launcher.fail_launches = LAUNCH_TRIES - 1  # a replacement launch is tried again
    async with pool.session() as session:
        assert session.browser.number == 2  # type: ignore[attr-defined]
    launcher.browsers[1].die()
    launcher.fail_launches = LAUNCH_TRIES
    with pytest.raises(BrowserError, match="cannot launch"):
        async with pool.session():
            pass
    await pool.aclose()
