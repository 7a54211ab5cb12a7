"""Chaos for ``webagent batch`` (real CLI, real Chromium, the offline model server): the browser's
main process killed (once, then its replacement too), its renderers killed, a model reply that never
comes. Every time the batch ends with exactly one line per task.

Only processes of the batch these tests started are signalled, found by PID below the batch's own
process (its Playwright driver's Chromium), never by name.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from webagent.batch.summary import BatchSummary
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..conftest import load_task_script
from ..procs import alive, descendants
from .test_batch_cli import (
    batch_args,
    cmdline,
    env,
    family_of,
    kill_all,
    local_task_file,
    result_lines,
    start_server,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ANSWER = "4711-ZETA"  # of the long-page task: six steps


@pytest.fixture(scope="module")
def paced() -> Iterator[FakeModelServer]:
    """Policy replies take 0.2 s: a six-step task runs for a few seconds, long enough to be hit."""
    yield from start_server({**load_task_script("local"), "latency_s": {"policy": 0.2}})


def long_tasks(site: SiteServer, path: Path, n: int, *, marker: str = "") -> Path:
    """``n`` copies of the long-page task; ``marker`` is appended to the goal of the first."""
    base = {t["id"]: t for t in map(json.loads, local_task_file(site, path).read_text().splitlines())}["longpage-code"]
    lines = [
        {**base, "id": f"long-{k}", "goal": base["goal"] + (f" {marker}" if marker and k == 0 else "")}
        for k in range(n)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def chromium_mains(root: int) -> list[int]:
    """Main Chromium processes below ``root`` (not its zygotes, renderers and utilities)."""
    mains = []
    for pid in descendants(root):
        args = cmdline(pid).decode(errors="replace").split("\0")
        if args and "chrom" in Path(args[0].split(" ")[0]).name and "--type=" not in " ".join(args):
            mains.append(pid)
    return mains


def renderers(root: int) -> list[int]:
    return [pid for pid in descendants(root) if b"--type=renderer" in cmdline(pid)]


def steps_written(out: Path, task_id: str) -> int:
    path = out / "runs" / task_id / "attempt-1" / "trajectory.jsonl"
    try:
        return len(path.read_text().splitlines())
    except OSError:
        return 0


def every_task_stepped(out: Path, n: int) -> bool:
    return all(steps_written(out, f"long-{k}") >= 1 for k in range(n))


def log_count(log: Path, event: str) -> int:
    return log.read_text(errors="replace").count(event) if log.exists() else 0


class Batch:
    """``webagent batch`` in the background; on exit it is stopped and what it started is ended."""

    def __init__(
        self, tasks: Path, out: Path, server: FakeModelServer, log: Path, *extra: str, last: tuple[str, ...] = ()
    ) -> None:
        """``last``: flags after the model flags (which they override)."""
        self.log = log
        with log.open("w") as fh:
            self.proc = subprocess.Popen(
                [*batch_args(tasks, out, server, *extra), *last],
                stdout=fh,
                stderr=subprocess.STDOUT,
                text=True,
                env=env(),
            )
        self.family: list[tuple[int, bytes]] = []

    def remember(self) -> None:
        """Note its processes now (helpers of a killed Chromium may outlive it: ended at the end)."""
        known = {pid for pid, _ in self.family}
        self.family += [(pid, args) for pid, args in family_of(self.proc.pid) if pid not in known]

    def kill(self, pids: list[int]) -> list[int]:
        """SIGKILL each of ``pids`` still there (a spare renderer may have ended since it was listed):
        the ones killed, never none."""
        self.remember()
        killed = []
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append(pid)
        assert killed, f"every process listed ended before it could be killed: {pids}"
        return killed

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the batch did not end: {self.log.read_text()[-3000:]}") from None

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.remember()
            self.proc.kill()
            self.proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while any(alive(p) for p, _ in self.family) and time.monotonic() < deadline:
            time.sleep(0.1)
        kill_all(self.family)


def one_line_each(out: Path, n: int) -> dict[str, dict[str, Any]]:
    rows = result_lines(out)
    ids = [r["id"] for r in rows]
    assert sorted(ids) == sorted(f"long-{k}" for k in range(n)), f"not one line per task: {ids}"
    return {r["id"]: r for r in rows}


# ---------------------------------------------------------------- the browser's main process killed


def test_browser_killed_mid_batch_every_task_rerun_and_succeeds(
    paced: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    n = 4
    tasks, out = long_tasks(site, tmp_path / "t.jsonl", n), tmp_path / "b"
    with Batch(tasks, out, paced, tmp_path / "batch.log", "--concurrency", str(n)) as batch:
        wait_until(lambda: every_task_stepped(out, n), 60, "a step of every task", batch.proc)
        (main,) = chromium_mains(batch.proc.pid)
        batch.kill([main])
        returncode = batch.wait()
    output = batch.log.read_text()
    assert returncode == 0, output[-3000:]
    assert "Traceback" not in output
    rows = one_line_each(out, n)
    for task_id, r in rows.items():
        assert r["success"] and r["answer"] == ANSWER, (task_id, r["message"])
        assert r["retried"] is True and r["attempts"] == 1
        (record,) = r["attempt_records"]
        assert [x["reason"] for x in record["reruns"]] == ["browser_crash"], record
        assert record["output_dir"] == f"runs/{task_id}/attempt-1" and record["steps"] == 6
        assert steps_written(out, task_id) == 6  # the re-run's steps only, in the same attempt directory
    summary = BatchSummary.model_validate_json((out / "summary.json").read_text())
    assert summary.retried_after_crash == n and summary.errors == 0 and summary.success_rate == 1.0


def test_a_replacement_that_dies_too_is_replaced_again(
    paced: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    n = 4
    tasks, out = long_tasks(site, tmp_path / "t.jsonl", n), tmp_path / "b"
    with Batch(tasks, out, paced, tmp_path / "batch.log", "--concurrency", str(n)) as batch:
        wait_until(lambda: every_task_stepped(out, n), 60, "a step of every task", batch.proc)
        (first,) = chromium_mains(batch.proc.pid)
        batch.kill([first])
        # Every task re-runs (its crashed run's directory is removed first), and takes a step on the
        # replacement: then the replacement dies as well.
        wait_until(lambda: log_count(batch.log, "task_rerun") >= n, 60, "the re-runs", batch.proc)
        wait_until(lambda: every_task_stepped(out, n), 60, "a step of every re-run", batch.proc)
        (second,) = [pid for pid in chromium_mains(batch.proc.pid) if pid != first]
        batch.kill([second])
        returncode = batch.wait()
    output = batch.log.read_text()
    assert returncode == 0, output[-3000:]
    rows = one_line_each(out, n)
    for task_id, r in rows.items():
        assert r["success"] and r["answer"] == ANSWER, (task_id, r["message"])
        (record,) = r["attempt_records"]
        assert [x["reason"] for x in record["reruns"]] == ["browser_crash", "browser_crash"], record
        assert steps_written(out, task_id) == 6


# ---------------------------------------------------------------- renderers killed


def test_renderers_killed_mid_batch_every_task_ends_with_a_clear_result(
    paced: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    n = 4
    tasks, out = long_tasks(site, tmp_path / "t.jsonl", n), tmp_path / "b"
    with Batch(tasks, out, paced, tmp_path / "batch.log", "--concurrency", str(n)) as batch:
        wait_until(lambda: every_task_stepped(out, n), 60, "a step of every task", batch.proc)
        killed = renderers(batch.proc.pid)
        assert killed, "the batch's Chromium should have renderer processes"
        batch.kill(killed)
        returncode = batch.wait()
    output = batch.log.read_text()
    assert "Traceback" not in output
    rows = one_line_each(out, n)
    errors = [r for r in rows.values() if r["stop_reason"] == "error"]
    assert returncode == (1 if errors else 0), output[-3000:]
    for task_id, r in rows.items():
        assert r["success"] or r["message"].strip(), (task_id, r)  # a success, or says why not
        assert not r["message"].startswith("internal error"), (task_id, r["message"])
        assert r["attempt_records"] and r["steps"] >= 1
    assert any(r["success"] for r in rows.values())  # a crashed page is reopened: tasks go on
    # The kill was felt: a page reopened after its renderer died, or (Chromium may not survive losing
    # all of them at once) the tasks re-run on a new browser.
    trajectories = [out / "runs" / task_id / "attempt-1" / "trajectory.jsonl" for task_id in rows]
    reopened = any("crashed" in path.read_text() for path in trajectories if path.exists())
    rerun = any(
        x["reason"] == "browser_crash" for r in rows.values() for a in r["attempt_records"] for x in a["reruns"]
    )
    assert reopened or rerun, output[-3000:]


# ---------------------------------------------------------------- a model reply that never comes


class HoldingProxy:
    """Passes model requests on to the offline server, except the first ``times`` policy requests
    whose body holds ``marker``: those get no answer (until the proxy closes)."""

    def __init__(self, upstream: str, marker: str, times: int) -> None:
        self.upstream, self.marker, self.times = upstream, marker.encode(), times
        self.held = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._release: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None
        self._client: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        assert self._release is not None and self._client is not None
        if self.marker in body and self.held < self.times:
            self.held += 1
            await self._release.wait()
            return web.Response(status=503, text="held")
        async with self._client.post(
            self.upstream + request.path, data=body, headers={"Content-Type": "application/json"}
        ) as reply:
            return web.Response(status=reply.status, body=await reply.read(), content_type="application/json")

    async def _start(self) -> None:
        self._release = asyncio.Event()
        self._client = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _stop(self) -> None:
        assert self._release is not None and self._runner is not None and self._client is not None
        self._release.set()
        await self._runner.cleanup()
        await self._client.close()

    def __enter__(self) -> HoldingProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


STALL_S = 8  # well above a step's few seconds on a busy machine, well below a test's budget


def stalled_batch(
    server: FakeModelServer, site: SiteServer, tmp_path: Path, holds: int
) -> tuple[int, dict[str, dict[str, Any]], str]:
    n = 3
    marker = "(held by the chaos test)"
    tasks, out = long_tasks(site, tmp_path / "t.jsonl", n, marker=marker), tmp_path / "b"
    with HoldingProxy(server.url, marker, holds) as proxy:
        extra = ["--concurrency", str(n), "--stall-timeout-s", str(STALL_S)]
        last = ("--policy-base-url", f"{proxy.url}/policy/v1", "--policy-timeout-s", "120")
        with Batch(tasks, out, server, tmp_path / "batch.log", *extra, last=last) as batch:
            returncode = batch.wait(90)
        assert proxy.held == holds
    return returncode, one_line_each(out, n), batch.log.read_text()


def test_a_stalled_session_is_cancelled_and_rerun(paced: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    returncode, rows, output = stalled_batch(paced, site, tmp_path, holds=1)
    assert returncode == 0, output[-3000:]
    assert all(r["success"] and r["answer"] == ANSWER for r in rows.values()), rows
    stuck = rows["long-0"]
    assert stuck["retried"] is True
    (record,) = stuck["attempt_records"]
    assert record["stalled"] is False and record["steps"] == 6
    assert record["reruns"][0]["reason"] == "stalled"
    message = record["reruns"][0]["message"]
    assert message.startswith(f"no progress for {STALL_S} s (stuck in step 1"), message
    kept = tmp_path / "b" / record["reruns"][0]["output_dir"]
    assert json.loads((kept / "result.json").read_text())["message"] == message
    summary = BatchSummary.model_validate_json((tmp_path / "b" / "summary.json").read_text())
    assert summary.stalled >= 1 and summary.errors == 0


def test_a_session_that_stalls_again_ends_with_the_stall_error(
    paced: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    returncode, rows, output = stalled_batch(paced, site, tmp_path, holds=2)
    assert returncode == 1, output[-3000:]  # a task ended with stop reason error: the batch says so
    stuck = rows["long-0"]
    assert stuck["success"] is False and stuck["stop_reason"] == "error"
    assert stuck["message"].startswith(f"no progress for {STALL_S} s (stuck in step 1"), stuck["message"]
    (record,) = stuck["attempt_records"]
    assert record["stalled"] is True and [x["reason"] for x in record["reruns"]] == ["stalled"]
    assert all(r["success"] for task_id, r in rows.items() if task_id != "long-0"), rows
