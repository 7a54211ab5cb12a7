"""``webagent batch`` in a subprocess: results, summary, kill -9 and SIGTERM then resume, bad input."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.batch.summary import BatchSummary
from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer, data_dir

from ..conftest import load_task_script
from ..procs import alive, descendants

pytestmark = pytest.mark.e2e

LOCAL_IDS = {"catalog-price", "catalog-feedback", "form-register", "longpage-code", "tabs-order"}


def start_server(script: dict[str, Any]) -> Iterator[FakeModelServer]:
    server = FakeModelServer(script)
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop_thread()


@pytest.fixture(scope="module")
def fast() -> Iterator[FakeModelServer]:
    yield from start_server(load_task_script("local"))


@pytest.fixture(scope="module")
def slow() -> Iterator[FakeModelServer]:
    """Policy replies take a little longer: a sequential batch of the five tasks (21 steps) takes several seconds."""
    yield from start_server({**load_task_script("local"), "latency_s": {"policy": 0.05}})


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}


def role_flags(server: FakeModelServer) -> list[str]:
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", server.base_url(role)]
    return flags


def batch_args(tasks: Path, out: Path, server: FakeModelServer, *extra: str) -> list[str]:
    return [sys.executable, "-m", "webagent", "batch", str(tasks), "--output", str(out), *extra, *role_flags(server)]


def webagent_batch(
    tasks: Path, out: Path, server: FakeModelServer, *extra: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        batch_args(tasks, out, server, *extra), capture_output=True, text=True, timeout=timeout, env=env()
    )


def local_task_file(site: SiteServer, path: Path) -> Path:
    text = (data_dir() / "local.jsonl").read_text(encoding="utf-8").replace("{base}", site.url)
    path.write_text(text, encoding="utf-8")
    return path


def result_lines(out: Path) -> list[dict[str, Any]]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), f"partial last line in {path}: {data[-80:]!r}"
    return [json.loads(line) for line in data.decode().splitlines()]  # every line is valid JSON


def complete_lines(out: Path) -> int:
    path = out / "results.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


# ---------------------------------------------------------------- processes


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def family_of(pid: int) -> list[tuple[int, bytes]]:
    """The processes a batch started (Playwright's driver, Chromium and its helpers), with their command lines."""
    return [(child, cmdline(child)) for child in descendants(pid)]


def kill_all(family: list[tuple[int, bytes]]) -> None:
    """SIGKILL the recorded processes that are still alive and still the same program."""
    for pid, args in family:
        if alive(pid) and cmdline(pid) == args:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def wait_until(predicate: Any, timeout: float, what: str, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the batch exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def start_batch(tasks: Path, out: Path, server: FakeModelServer, log: Path, *extra: str) -> subprocess.Popen[str]:
    with log.open("w") as fh:
        return subprocess.Popen(
            batch_args(tasks, out, server, *(extra or ("--concurrency", "1"))),
            stdout=fh,
            stderr=subprocess.STDOUT,
            text=True,
            env=env(),
        )


# ---------------------------------------------------------------- tests


def test_batch_success(fast: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    tasks = local_task_file(site, tmp_path / "local.jsonl")
    out = tmp_path / "batch"
    proc = webagent_batch(tasks, out, fast, "--concurrency", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = result_lines(out)
    assert len(rows) == 5 and {r["id"] for r in rows} == LOCAL_IDS
    assert all(r["success"] for r in rows)
    summary = BatchSummary.model_validate_json((out / "summary.json").read_text())
    assert summary.success_rate == 1.0 and summary.finished == 5 and summary.tasks == 5
    assert summary.interrupted is False and summary.run.tasks_finished == 5
    assert BatchSummary.model_validate_json(proc.stdout) == summary  # --json: summary.json on stdout, nothing else
    assert "validated success (pass@1)" in proc.stderr and "100.0%" in proc.stderr
    assert "batch: 5/5 done" in proc.stderr  # the progress line (not a terminal: plain lines)
    # Before the first progress line (the first step's end), what it is doing.
    progress = [line for line in proc.stderr.splitlines() if line.startswith("batch:")]
    assert progress[:2] == [
        "batch: 5 tasks to run (0 done before): launching the browser...",
        "batch: runs started: opening their pages, then asking the models (a progress line as steps end)",
    ]
    assert "Traceback" not in proc.stderr
    for r in rows:
        assert (out / r["attempt_records"][0]["output_dir"] / "report.html").exists()

    # Re-running the finished batch: everything resumed, nothing run.
    again = webagent_batch(tasks, out, fast, "--json", "-q")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["run"]["tasks_resumed"] == 5
    assert len(result_lines(out)) == 5


def test_kill_9_then_resume(slow: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    tasks = local_task_file(site, tmp_path / "local.jsonl")
    out = tmp_path / "batch"
    proc = start_batch(tasks, out, slow, tmp_path / "first.log")
    family: list[tuple[int, bytes]] = []
    try:
        wait_until(lambda: complete_lines(out) >= 1, 60, "a finished task", proc)
        family = family_of(proc.pid)  # the Playwright driver and Chromium, before they are orphaned
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        kill_all(family)
    assert proc.returncode == -signal.SIGKILL
    first = result_lines(out)
    assert 1 <= len(first) < 5, "the batch should have been killed half-way"

    done = webagent_batch(tasks, out, slow, "--concurrency", "1", "-q")
    assert done.returncode == 0, done.stderr
    rows = result_lines(out)
    assert len(rows) == 5
    assert len({r["id"] for r in rows}) == 5 and {r["id"] for r in rows} == LOCAL_IDS
    assert rows[: len(first)] == first
    assert all(r["success"] for r in rows)
    summary = BatchSummary.model_validate_json((out / "summary.json").read_text())
    assert summary.run.tasks_resumed == len(first) and summary.finished == 5


def test_worker_processes_end_with_a_killed_batch(slow: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    """kill -9 of a batch run with --workers: its workers (and their browsers) see their input end
    and exit by themselves; the same command then resumes."""
    tasks = local_task_file(site, tmp_path / "local.jsonl")
    out = tmp_path / "batch"
    extra = ("--concurrency", "2", "--workers", "2")
    proc = start_batch(tasks, out, slow, tmp_path / "first.log", *extra)
    family: list[tuple[int, bytes]] = []
    try:
        wait_until(lambda: complete_lines(out) >= 1, 60, "a finished task", proc)
        family = family_of(proc.pid)
        workers = [pid for pid, args in family if b"webagent.batch.worker" in args]
        assert len(workers) == 2, family
        assert any(b"chromium" in args for _, args in family)
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 60
        while any(alive(p) for p, _ in family) and time.monotonic() < deadline:
            time.sleep(0.1)
        leftovers = [(p, args[:80]) for p, args in family if alive(p)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        kill_all(family)
    assert leftovers == [], f"processes left running after the batch was killed: {leftovers}"
    first = result_lines(out)
    assert 1 <= len(first) < 5

    done = webagent_batch(tasks, out, slow, *extra, "-q")
    assert done.returncode == 0, done.stderr
    rows = result_lines(out)
    assert len(rows) == 5 and {r["id"] for r in rows} == LOCAL_IDS and all(r["success"] for r in rows)
    assert rows[: len(first)] == first


def test_sigterm_stops_cleanly_then_resume(slow: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    tasks = local_task_file(site, tmp_path / "local.jsonl")
    out = tmp_path / "batch"
    log = tmp_path / "first.log"
    proc = start_batch(tasks, out, slow, log)
    family: list[tuple[int, bytes]] = []
    try:
        wait_until(lambda: complete_lines(out) >= 1, 60, "a finished task", proc)
        family = family_of(proc.pid)
        assert any(b"chromium" in args for _, args in family), "the batch should have a browser running"
        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(timeout=30)
        # A clean stop closes its browsers: nothing it started is left running.
        deadline = time.monotonic() + 10
        while any(alive(p) for p, _ in family) and time.monotonic() < deadline:
            time.sleep(0.1)
        leftovers = [(p, args[:80]) for p, args in family if alive(p)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        kill_all(family)
    output = log.read_text()
    assert returncode == 130, output
    assert "Traceback" not in output
    assert leftovers == [], f"processes left running after SIGTERM: {leftovers}"
    first = result_lines(out)
    assert 1 <= len(first) < 5
    summary = BatchSummary.model_validate_json((out / "summary.json").read_text())
    assert summary.interrupted is True and summary.finished == len(first)
    assert "(interrupted)" in output

    done = webagent_batch(tasks, out, slow, "--concurrency", "4", "-q")
    assert done.returncode == 0, done.stderr
    rows = result_lines(out)
    assert len(rows) == 5 and {r["id"] for r in rows} == LOCAL_IDS
    assert rows[: len(first)] == first
    assert BatchSummary.model_validate_json((out / "summary.json").read_text()).interrupted is False


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"id": "a", "url": "https://example.com", "goal": "g"}', "{broken"], ":2: not valid JSON"),
        (["# comment", "", '{"id": "a", "url": "gopher://x", "goal": "g"}'], ":3: invalid URL"),
        # A task file is data: the operator's secrets, files and network stay out of its lines.
        (
            [
                '{"id": "a", "url": "https://example.com", "goal": "g"}',
                '{"id": "b", "url": "https://example.com", "goal": "g", '
                '"browser": {"extra_http_headers": {"X": "{{PASSWORD}}"}}}',
            ],
            ":2: browser.extra_http_headers.X: a {{NAME}} secret placeholder is refused in a file that is not "
            "trusted; pass --trust-tasks if the file is yours",
        ),
        (
            ['{"id": "a", "url": "https://example.com", "goal": "g", "browser": {"upload_dir": "/root"}}'],
            ":1: browser.upload_dir: refused in a file that is not trusted (it lets pages receive the operator's "
            "files); pass --trust-tasks",
        ),
        (['{"id": "a", "url": "file:///etc/passwd", "goal": "g"}'], ":1: url: a file: start URL is refused"),
    ],
)
def test_bad_task_file_exits_2(fast: FakeModelServer, tmp_path: Path, lines: list[str], message: str) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    proc = webagent_batch(tasks, tmp_path / "out", fast, "--secret", "PASSWORD=pw-value-4711")
    assert proc.returncode == 2, proc.stderr
    assert "pw-value-4711" not in proc.stderr + proc.stdout
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1, proc.stderr
    assert err[0].startswith(f"webagent: error: {tasks}{message}"), err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "does not exist"),
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--workers", "none"], "--workers must be a whole number of at least 1, or auto"),
        (["--workers", "2", "--ray"], "not both"),
    ],
)
def test_bad_arguments_exit_2(
    fast: FakeModelServer, site: SiteServer, tmp_path: Path, extra: list[str], message: str
) -> None:
    tasks = tmp_path / "missing.jsonl" if not extra else local_task_file(site, tmp_path / "local.jsonl")
    proc = webagent_batch(tasks, tmp_path / "out", fast, *extra)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("webagent: error:") and message in err[0], proc.stderr
    assert not (tmp_path / "out").exists()


def test_webvoyager_task_file_and_references(fast: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    ours = {t["id"]: t for t in map(json.loads, local_task_file(site, tmp_path / "l.jsonl").read_text().splitlines())}
    tasks = tmp_path / "WebVoyager_data.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({"web_name": "Local", "id": f"Local--{n}", "ques": ours[key]["goal"], "web": ours[key]["url"]})
            + "\n"
            for n, key in enumerate(["catalog-price", "tabs-order"])
        )
    )
    refs = tmp_path / "reference_answer.json"
    refs.write_text(
        json.dumps(
            {
                "Local": {
                    "notice": "",
                    "answers": [
                        {"id": 0, "type": "golden", "ans": "$12.50"},
                        {"id": 1, "type": "golden", "ans": "ORD-99999"},
                    ],
                }
            }
        )
    )
    out = tmp_path / "wv"
    proc = webagent_batch(tasks, out, fast, "--concurrency", "2", "--references", str(refs), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["id"]: r for r in result_lines(out)}
    assert sorted(rows) == ["Local--0", "Local--1"]
    assert rows["Local--0"]["success"] and rows["Local--0"]["answer"] == "$12.50"
    assert rows["Local--1"]["success"] and rows["Local--1"]["answer"] == "ORD-58213"
    assert (
        rows["Local--0"]["goal"] == ours["catalog-price"]["goal"]
        and rows["Local--0"]["url"] == ours["catalog-price"]["url"]
    )
    assert rows["Local--0"]["reference_match"] is True and rows["Local--1"]["reference_match"] is False
    summary = BatchSummary.model_validate_json(proc.stdout)
    assert summary.success_rate == 1.0
    assert summary.reference.model_dump() == {"scored": 2, "matched": 1, "match_rate": 0.5}
    assert "matches reference answer" in proc.stderr and "1/2 (50.0%)" in proc.stderr


def test_a_browser_that_cannot_launch_is_one_usage_error(
    fast: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    tasks = local_task_file(site, tmp_path / "local.jsonl")
    bad = tmp_path / "not-chromium"
    bad.write_text("#!/bin/sh\nexit 1\n")
    bad.chmod(0o755)
    proc = webagent_batch(tasks, tmp_path / "out", fast, "--executable-path", str(bad))
    assert proc.returncode == 2, proc.stderr
    *before, error = proc.stderr.strip().splitlines()
    assert error.startswith("webagent: error:") and "Traceback" not in proc.stderr, proc.stderr
    assert before == ["batch: 5 tasks to run (0 done before): launching the browser..."]  # what failed, no more
    assert result_lines(tmp_path / "out") == []  # no task was run, so none is recorded as failed


def test_a_task_that_ends_in_error_makes_the_batch_exit_1(
    fast: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    ours = {t["id"]: t for t in map(json.loads, local_task_file(site, tmp_path / "l.jsonl").read_text().splitlines())}
    tasks = tmp_path / "tasks.jsonl"
    unreachable = {"id": "unreachable", "url": "http://127.0.0.1:9/", "goal": "Find anything at all"}
    tasks.write_text(json.dumps(ours["tabs-order"]) + "\n" + json.dumps(unreachable) + "\n")
    out = tmp_path / "out"
    proc = webagent_batch(tasks, out, fast, "--concurrency", "2")
    assert proc.returncode == 1, proc.stderr  # not 0: a pipeline must notice
    rows = {r["id"]: r for r in result_lines(out)}
    assert sorted(rows) == ["tabs-order", "unreachable"]
    assert rows["tabs-order"]["success"] is True
    assert rows["unreachable"]["stop_reason"] == "error" and "cannot open" in rows["unreachable"]["message"]
    assert rows["unreachable"]["retried"] is False  # the site, not the browser: not re-run
    assert BatchSummary.model_validate_json((out / "summary.json").read_text()).errors == 1
    assert "Traceback" not in proc.stderr

    # Resumed with nothing left to run: the same verdict, and a table without "None" in it.
    again = webagent_batch(tasks, out, fast)
    assert again.returncode == 1, again.stderr
    assert "None" not in again.stderr, again.stderr
    latency = next(line for line in again.stderr.splitlines() if "step latency p50/p90" in line)
    assert latency.replace("step latency p50/p90", "").strip(" │|") == "-", latency
    assert len(result_lines(out)) == 2


def test_stall_timeout_must_not_be_negative(fast: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    tasks = local_task_file(site, tmp_path / "local.jsonl")
    proc = webagent_batch(tasks, tmp_path / "out", fast, "--stall-timeout-s", "-1")
    assert proc.returncode == 2, proc.stderr
    assert "--stall-timeout-s must be at least 0" in proc.stderr
    assert not (tmp_path / "out").exists()
