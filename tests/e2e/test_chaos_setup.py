"""Chaos for ``webagent batch`` while its sessions are being set up (issue 43): real CLI, real Chromium,
the offline model server. Every task's start page is held by a gate in front of the local site, so
that every session is known to be in its set-up (its context open, its guard installed, its first
navigation under way, no step yet) when its renderers, or the browser itself, are killed. Every
task then passes, re-run or not, with one line each; a re-run is a ``setup_crash``, counted apart.

Only processes below the batch's own are signalled (``test_chaos_batch.Batch``).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from webagent.batch.summary import BatchSummary
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from .test_batch_cli import wait_until
from .test_chaos_batch import (
    ANSWER,
    Batch,
    chromium_mains,
    long_tasks,
    one_line_each,
    paced,
    renderers,
    steps_written,
)

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

__all__ = ["paced"]  # the fixture, from test_chaos_batch


class StartGate:
    """A local server in front of the site: each request waits until ``open()`` (at most a minute),
    then gets the site's answer. ``held``: the requests that waited (each session's first navigation)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.opened = threading.Event()
        self.held = 0
        self._lock = threading.Lock()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if not gate.opened.is_set():
                    with gate._lock:
                        gate.held += 1
                    gate.opened.wait(60)
                with urllib.request.urlopen(gate.upstream + self.path, timeout=30) as reply:
                    body = reply.read()
                    self.send_response(reply.status)
                    self.send_header("Content-Type", reply.headers.get("Content-Type", "text/html"))
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def open(self) -> None:
        self.opened.set()

    def __enter__(self) -> StartGate:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.opened.set()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def gate(site: SiteServer) -> Iterator[StartGate]:
    with StartGate(site.url) as running:
        yield running


def gated_tasks(site: SiteServer, gate: StartGate, path: Path, n: int) -> Path:
    """``n`` long-page tasks whose start page is behind the gate."""
    long_tasks(site, path, n)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**t, "url": t["url"].replace(site.url, gate.url)}) + "\n" for t in lines))
    return path


def set_up_batch(
    server: FakeModelServer, site: SiteServer, gate: StartGate, tmp_path: Path, kill: str
) -> tuple[int, dict[str, dict[str, Any]], BatchSummary, str]:
    """Three tasks; once every session waits for its start page, ``kill`` ("renderers" or "browser")."""
    n = 3
    tasks, out = gated_tasks(site, gate, tmp_path / "t.jsonl", n), tmp_path / "b"
    with Batch(tasks, out, server, tmp_path / "batch.log", "--concurrency", str(n)) as batch:
        wait_until(lambda: gate.held >= n, 60, "every session's first navigation", batch.proc)
        assert all(steps_written(out, f"long-{k}") == 0 for k in range(n))  # all of them in set-up
        if kill == "renderers":
            killed = renderers(batch.proc.pid)
            assert killed, "the sessions' tabs should have renderer processes"
        else:
            killed = chromium_mains(batch.proc.pid)
            assert len(killed) == 1, killed
        batch.kill(killed)
        gate.open()
        returncode = batch.wait(120)
    output = batch.log.read_text()
    return (
        returncode,
        one_line_each(out, n),
        BatchSummary.model_validate_json((out / "summary.json").read_text()),
        output,
    )


def reruns(row: dict[str, Any]) -> list[str]:
    return [x["reason"] for a in row["attempt_records"] for x in a["reruns"]]


def test_renderers_killed_while_sessions_open_every_task_passes(
    paced: FakeModelServer, site: SiteServer, gate: StartGate, tmp_path: Path
) -> None:
    returncode, rows, summary, output = set_up_batch(paced, site, gate, tmp_path, "renderers")
    assert returncode == 0, output[-3000:]
    assert "Traceback" not in output
    for task_id, row in rows.items():
        assert row["success"] and row["answer"] == ANSWER, (task_id, row["message"])
        assert row["attempts"] == 1 and not row["infrastructure"]
        assert set(reruns(row)) <= {"setup_crash"}, reruns(row)  # reopened in the session, or re-run
    assert summary.errors == 0 and summary.success_rate == 1.0
    # The kill was felt: a tab reopened as its start page loaded, or the run set up again.
    assert "page_crashed" in output or summary.setup_crash_reruns > 0, output[-3000:]


def test_the_browser_killed_while_sessions_open_every_task_is_rerun_as_a_set_up_crash(
    paced: FakeModelServer, site: SiteServer, gate: StartGate, tmp_path: Path
) -> None:
    returncode, rows, summary, output = set_up_batch(paced, site, gate, tmp_path, "browser")
    assert returncode == 0, output[-3000:]
    assert "Traceback" not in output
    for task_id, row in rows.items():
        assert row["success"] and row["answer"] == ANSWER, (task_id, row["message"])
        assert row["retried"] and row["attempts"] == 1 and not row["infrastructure"]
        assert reruns(row) == ["setup_crash"], row["attempt_records"]
        assert row["attempt_records"][0]["reruns"][0]["steps"] == 0
    assert summary.setup_crash_reruns == 3 and summary.retried_after_crash == 0
    assert summary.errors == 0 and summary.success_rate == 1.0
    assert "re-run after a crash in set-up" in output  # the live line and the table count them apart
