"""The batch runner with real Chromium, the offline model server and the local sites: results,
resume, pass@k, crashes, stop; the results file; exit codes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest
from playwright.async_api import async_playwright

from webagent.batch import BatchRunner, BatchStats, ResultsFile, TaskResult, cost_of, read_results
from webagent.batch.cli import EXIT_DONE, EXIT_ERRORS, EXIT_INTERRUPTED, exit_code
from webagent.batch.summary import summarize
from webagent.browser.launcher import launch_browser
from webagent.browser.session import BrowserSession
from webagent.config import AgentConfig, BrowserConfig
from webagent.errors import BrowserError, NavigationError
from webagent.tasks import TaskSpec, load_tasks
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer, data_dir

from ..conftest import load_task_script, make_config
from ..procs import alive, descendants

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
    text = (data_dir() / "local.jsonl").read_text(encoding="utf-8").replace("{base}", site.url)
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
        assert summary.finished == 5 and summary.success_rate == 1.0
        assert summary.run.tasks_resumed == 5 and summary.run.tasks_finished == 0


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
    from webagent.testing.offline import offline_config

    return offline_config("http://127.0.0.1:9", "holo1.5")


@real_browser
async def test_an_unexpected_error_in_a_task_is_not_silently_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug inside one task must not make the batch end "normally" with tasks neither run nor reported."""

    def broken_start(self: Any, spec: Any) -> Any:
        raise RuntimeError("boom: an unexpected bug")

    monkeypatch.setattr("webagent.batch.runner.Agent.start", broken_start)
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
        assert summary.attempts_per_task == round(5 / 3, 3)
        assert summary.reference.model_dump() == {"scored": 3, "matched": 1, "match_rate": 0.333}

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
    assert summary.retried_after_crash == 2 and summary.success_rate == 1.0
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


def test_exit_codes() -> None:
    base = summarize([], BatchStats(total=4, already_done=0), AgentConfig(), attempts=1)
    base.finished = 4
    assert exit_code(base) == EXIT_DONE == 0
    assert exit_code(base.model_copy(update={"errors": 3})) == EXIT_ERRORS == 1
    assert exit_code(base.model_copy(update={"finished": 3})) == EXIT_ERRORS  # a task without its result line
    assert exit_code(base.model_copy(update={"interrupted": True, "errors": 3})) == EXIT_INTERRUPTED == 130
    assert len({EXIT_DONE, EXIT_ERRORS, EXIT_INTERRUPTED, 2}) == 4  # 2: usage errors (webagent.cli)


# ---------------------------------------------------------------- fakes: the browser pool
