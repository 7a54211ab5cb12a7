"""No browser of a worker process (``batch --workers 2``) or a Ray actor has a DevTools port that other
local users could reach while secrets or a signed-in state are in use; without either, it has one, as
in one process (so these tests can tell). The Chromium main processes below each are read from
/proc while the batch runs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from webagent.batch import BatchRunner, BatchStats, RayCluster
from webagent.runtime import checked_sessions
from webagent.tasks import load_tasks
from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer, data_dir

from ..conftest import make_config
from ..procs import chromium_mains, cmdline

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

SECRET = "worker-s3cret-42"
PORT_FLAG = "--remote-debugging-port"
#: ``slow_model``'s replies a little slower here: each worker's browser is up for a few seconds, time to be seen.
MODEL_LATENCY_S = 0.3


def _tasks(site: SiteServer, path: Path, state: Path | None = None) -> Path:
    text = (data_dir() / "local.jsonl").read_text(encoding="utf-8").replace("{base}", site.url)
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    if state is not None:  # every task signed in: the state is the task's, not the config's
        lines = [{**line, "browser": {"storage_state": str(state)}} for line in lines]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _browsers_seen(root: int, running: Any, *, until_s: float = 120) -> dict[int, list[str]]:
    """The command lines of the Chromium main processes below ``root`` while ``running()`` holds."""
    seen: dict[int, list[str]] = {}
    deadline = time.monotonic() + until_s
    while running() and time.monotonic() < deadline:
        for pid in chromium_mains(root) - set(seen):
            args = cmdline(pid)
            if args and args != [""]:
                seen[pid] = args
        time.sleep(0.05)
    return seen


@pytest.mark.parametrize("holding", ["secret", "state", "nothing"])
def test_no_worker_browser_has_a_devtools_port_with_secrets_or_a_state(
    site: SiteServer, slow_model: FakeModelServer, tmp_path: Path, holding: str
) -> None:
    state = None
    if holding == "state":
        state = tmp_path / "state.json"
        state.write_text('{"cookies": [], "origins": []}')
        state.chmod(0o600)
    tasks = _tasks(site, tmp_path / "tasks.jsonl", state)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    if holding == "secret":
        env["WEBAGENT_SECRET_PIN"] = SECRET
    command = [sys.executable, "-m", "webagent", "batch", str(tasks), "--output", str(tmp_path / "out")]
    command += ["--workers", "2", "--concurrency", "4", "--trust-tasks", "-q", "--api-key", "offline"]
    command += ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"]]
    for role in ("policy", "localizer", "validator"):
        command += [f"--{role}-base-url", slow_model.base_url(role)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        seen = _browsers_seen(proc.pid, lambda: proc.poll() is None)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    assert len(seen) >= 2, seen  # a browser in each worker
    with_port = [pid for pid, args in seen.items() if any(a.startswith(PORT_FLAG) for a in args)]
    if holding == "nothing":
        assert sorted(with_port) == sorted(seen)  # as in one process: the port is there
    else:
        assert with_port == [], {pid: seen[pid] for pid in with_port}


ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    from .test_ray import RAY_ENV, _cluster

    with pytest.MonkeyPatch.context() as mp:
        for key, value in RAY_ENV.items():
            mp.setenv(key, value)
        mp.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)
        yield from _cluster()


@pytest.mark.slow
@pytest.mark.parametrize("holding", ["secret", "nothing"])
def test_no_ray_actor_browser_has_a_devtools_port_with_secrets(
    cluster: str, site: SiteServer, slow_model: FakeModelServer, tmp_path: Path, holding: str
) -> None:
    config = make_config(slow_model)
    if holding == "secret":
        config.secrets = {"PIN": SecretStr(SECRET)}
    tasks = load_tasks(_tasks(site, tmp_path / "tasks.jsonl"))
    config = checked_sessions(config, (task.browser for task in tasks))  # as webagent batch does
    actors: set[int] = set()
    seen: dict[int, list[str]] = {}

    def on_update(stats: BatchStats) -> None:
        pool = runner.pool
        if pool is None or stats.phase != "run" or len(actors) >= 2:
            return
        actors.update(ray.get([slot.handle.pid.remote() for slot in pool.actors]))
        if pool.nodes is not None:  # the node's browser, shared by its 2 actors
            actors.update(ray.get([handle.pid.remote() for handle in pool.nodes.handles.values()]))

    async def run() -> None:
        done = asyncio.Event()

        async def watch() -> None:
            while not done.is_set():
                for actor in list(actors):
                    for pid in chromium_mains(actor) - set(seen):
                        seen[pid] = cmdline(pid)
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch())
        try:
            await runner.run()
        finally:
            done.set()
            await watcher

    runner = BatchRunner(
        config, tasks, tmp_path / "out", concurrency=2, on_update=on_update, ray=RayCluster(address=cluster, actors=2)
    )
    asyncio.run(run())
    assert len(actors) >= 2 and seen, (actors, seen)
    with_port = [pid for pid, args in seen.items() if any(a.startswith(PORT_FLAG) for a in args)]
    if holding == "nothing":  # a browser each, or the one node's shared by its actors: reached over its port
        assert sorted(with_port) == sorted(seen)
    else:  # a browser each, on Playwright's pipe only
        assert with_port == [], {pid: seen[pid] for pid in with_port}
