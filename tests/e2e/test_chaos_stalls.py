"""Chaos: model servers and sites that stall. Every task of a batch still ends, within its deadlines,
with exactly one line in results.jsonl: a success after retries, or a clear error or time limit.

Real Chromium, the offline model server (its ``stall`` fault sends half a reply and then nothing;
``disconnect`` closes the connection) and a site that accepts connections and never answers.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.batch import BatchRunner, read_results
from webagent.testing.sites import SiteServer

from ..batch.test_runner import LOCAL_IDS, local_lines, task_file
from ..conftest import ServerFactory, load_task_script, make_config

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

BATCH_DEADLINE_S = 120  # a hang fails the test instead of blocking the suite


def one_line_per_task(out: Path, ids: list[str]) -> dict[str, Any]:
    lines = read_results(out)
    assert sorted(r.id for r in lines) == sorted(ids)  # exactly one line per task
    return {r.id: r for r in lines}


async def run_batch(runner: BatchRunner) -> None:
    async with asyncio.timeout(BATCH_DEADLINE_S):
        await runner.run()


async def test_a_model_server_that_stalls_mid_reply_or_drops_is_retried(
    model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    faults = [
        {"role": "policy", "nth": 2, "kind": "stall"},
        {"role": "policy", "nth": 5, "kind": "disconnect"},
        {"role": "localizer", "nth": 1, "kind": "stall"},
        {"role": "validator", "nth": 2, "kind": "stall"},
    ]
    async with model_server({**load_task_script("local"), "faults": faults}) as server:
        config = make_config(server)
        for role in ("policy", "localizer", "validator"):
            config.role(role).timeout_s = 1.0  # a stalled reply costs one second, then a retry
        tasks = task_file(tmp_path / "tasks.jsonl", list(local_lines(site).values()))
        runner = BatchRunner(config, tasks, tmp_path / "out", concurrency=5)
        await run_batch(runner)
        assert server.fault_counts["stall"] == 3 and server.fault_counts["disconnect"] == 1
    results = one_line_per_task(tmp_path / "out", LOCAL_IDS)
    assert all(r.success for r in results.values()), {r.id: r.message for r in results.values()}
    retries = sum(r.usage.role(role).retries for r in results.values() for role in ("policy", "localizer", "validator"))
    assert retries == 4


async def test_a_model_server_that_always_stalls_ends_every_task_with_an_error(
    model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    async with model_server({**load_task_script("local"), "fault_rates": {"stall": 1.0}}) as server:
        config = make_config(server)
        for role in ("policy", "localizer", "validator"):
            config.role(role).timeout_s = 0.5
            config.role(role).max_retries = 1
        tasks = task_file(tmp_path / "tasks.jsonl", list(local_lines(site).values()))
        runner = BatchRunner(config, tasks, tmp_path / "out", concurrency=5)
        await run_batch(runner)
    results = one_line_per_task(tmp_path / "out", LOCAL_IDS)
    for result in results.values():
        assert result.stop_reason == "error" and not result.success
        assert "policy model" in result.message and "timed out after 2 attempts" in result.message


@pytest.fixture
def silent_site() -> Iterator[str]:
    """An HTTP server that accepts every connection and never answers (closed at the end)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


async def test_a_site_that_never_answers_ends_each_task_at_its_time_limit(
    model_server: ServerFactory, silent_site: str, tmp_path: Path
) -> None:
    async with model_server(load_task_script("local")) as server:
        config = make_config(server, max_time_s=2.0)  # the start page would wait 30 s (navigation_timeout_s)
        ids = ["silent-1", "silent-2", "silent-3"]
        tasks = task_file(
            tmp_path / "tasks.jsonl", [{"id": i, "url": f"{silent_site}/{i}", "goal": "Find anything"} for i in ids]
        )
        runner = BatchRunner(config, tasks, tmp_path / "out", concurrency=3)
        await run_batch(runner)
    results = one_line_per_task(tmp_path / "out", ids)
    for result in results.values():
        assert result.stop_reason == "max_time", result.message
        assert "while opening the start page" in result.message
        record = result.attempt_records[0]
        assert (tmp_path / "out" / record.output_dir / "result.json").is_file()  # its files are written
