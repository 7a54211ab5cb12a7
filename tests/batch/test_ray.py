"""``batch --ray`` on a local Ray cluster with 2 workers: fan-out, a dead actor, a killed driver resumed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.batch import BatchRunner, BatchStats, RayCluster, read_results
from webagent.batch.summary import BatchSummary
from webagent.replay import ReplayCache
from webagent.suite import Check, Suite, run_suite
from webagent.tasks import TaskSpec
from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer

from ..conftest import make_config

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LOCAL_IDS = ["catalog-price", "catalog-feedback", "form-register", "longpage-code", "tabs-order"]


#: A test cluster on the loopback interface only, without token authentication.
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A Ray head with 2 CPUs (2 one-CPU actors) in its own process group, killed as a whole at the end."""

    with pytest.MonkeyPatch.context() as mp:
        for key, value in RAY_ENV.items():
            mp.setenv(key, value)
        mp.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)  # read at import: set it for this driver
        yield from _cluster()


def _cluster() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = tempfile.mkdtemp(prefix="wa-ray-")  # short: Ray's socket paths live under it
    ray_bin = str(Path(sys.executable).parent / "ray")
    args = [ray_bin, "start", "--head", "--block", "--num-cpus=2", f"--port={port}", f"--temp-dir={temp}"]
    args += ["--include-dashboard=false", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
    env = {**os.environ, **RAY_ENV, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if "Ray runtime started" in line or "block forever" in line:
                break
            if not line and proc.poll() is not None:
                raise RuntimeError(f"ray start exited with {proc.returncode}")
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        shutil.rmtree(temp, ignore_errors=True)


def specs(local_tasks: dict[str, Any]) -> list[TaskSpec]:
    return [TaskSpec(id=i, url=local_tasks[i]["url"], goal=local_tasks[i]["goal"]) for i in LOCAL_IDS]


def test_tasks_fan_out_to_two_actors_and_survive_a_dead_one(
    cluster: str, slow_model: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    pids: set[int] = set()
    killed: list[int] = []

    def on_update(stats: BatchStats) -> None:
        actors = runner.pool.actors if runner.pool is not None else []
        busy = [s for s in actors if s.in_flight]
        if not pids and len(busy) == 2:
            pids.update(ray.get([s.handle.pid.remote() for s in actors]))
        if pids and stats.finished_now >= 1 and not killed and busy:
            victim = max(busy, key=lambda s: s.in_flight)
            killed.append(victim.in_flight)
            ray.kill(victim.handle, no_restart=True)

    cluster_ = RayCluster(address=cluster, actors=2)
    runner = BatchRunner(
        make_config(slow_model), specs(local_tasks), tmp_path, concurrency=1, on_update=on_update, ray=cluster_
    )
    stats = asyncio.run(runner.run())
    results = {r.id: r for r in read_results(tmp_path)}
    assert sorted(results) == sorted(LOCAL_IDS) and all(r.success for r in results.values())
    assert len(pids) == 2  # two worker processes ran tasks at once
    assert runner.pool is not None
    assert killed and runner.pool.actor_deaths == 1 and stats.retried >= 1  # its task ran again elsewhere
    assert stats.steps == sum(r.steps for r in results.values()) and len(stats.step_total_s) == stats.steps
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == len(LOCAL_IDS)
    for r in results.values():
        assert (tmp_path / r.attempt_records[0].output_dir / "result.json").is_file()


def test_killed_driver_resumes(
    cluster: str, slow_model: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": i, **{k: local_tasks[i][k] for k in ("url", "goal")}}) + "\n" for i in LOCAL_IDS)
    )
    out = tmp_path / "out"
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", slow_model.base_url(role)]
    cmd = [sys.executable, "-m", "webagent", "batch", str(tasks), "--output", str(out), "--concurrency", "1"]
    cmd += ["--ray", cluster, "--ray-actors", "2", "-q", *flags]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")} | RAY_ENV
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (results.exists() and results.read_bytes().count(b"\n") >= 1):
        time.sleep(0.1)
    driver.kill()  # SIGKILL: no chance to clean up
    driver.wait()
    before = results.read_bytes()
    done_before = before.count(b"\n")
    assert 1 <= done_before < len(LOCAL_IDS)
    finished = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    after = results.read_bytes()
    assert after.startswith(before)  # finished lines are kept as they were
    ids = [json.loads(line)["id"] for line in after.decode().splitlines()]
    assert sorted(ids) == sorted(LOCAL_IDS)  # each task exactly once
    summary = BatchSummary.model_validate_json((out / "summary.json").read_text())
    assert summary.tasks == len(LOCAL_IDS) and summary.finished == len(LOCAL_IDS)


def test_a_suite_runs_on_ray_with_each_checks_options_and_one_shared_replay_cache(
    cluster: str, slow_model: FakeModelServer, local_tasks: dict[str, Any], tmp_path: Path
) -> None:
    """The checks travel to the actors as tasks with their options (a step limit, the trace kept);
    both actors record into one replay cache file, and a second run replays every passed check."""
    names = LOCAL_IDS[:4]
    checks = [Check(name=i, url=local_tasks[i]["url"], goal=local_tasks[i]["goal"]) for i in names]
    checks.append(
        Check(
            name="one-step",
            url=local_tasks["form-register"]["url"],
            goal=local_tasks["form-register"]["goal"],
            max_steps=1,
        )
    )
    suite = Suite(name="on ray", path="suite.yaml", checks=checks)
    cache = ReplayCache(tmp_path / "cache.json")
    ray_ = RayCluster(address=cluster, actors=2)
    out = tmp_path / "first"
    summary, items, interrupted = asyncio.run(
        run_suite(make_config(slow_model), suite, out, concurrency=2, cache=cache, trace="always", ray=ray_)
    )
    outcome = {o.check.name: o for o in items}
    assert not interrupted and summary["passed"] == len(names), summary
    one_step = outcome["one-step"].result
    assert one_step is not None and one_step.stop_reason == "max_steps" and one_step.steps == 1
    for name in [*names, "one-step"]:  # the suite's --trace, an option of each task, kept on the actors
        result = outcome[name].result
        assert result is not None and (out / result.attempt_records[0].output_dir / "trace.zip").is_file()
    recorded = json.loads((tmp_path / "cache.json").read_text())["checks"]
    assert sorted(recorded) == sorted(names)  # both actors' recordings, none lost to the other's write
    assert sorted(cache.updated) == sorted(names)  # what the driver reports as updated

    again, items, _ = asyncio.run(
        run_suite(
            make_config(slow_model), suite, tmp_path / "second", concurrency=2, cache=ReplayCache(cache.path), ray=ray_
        )
    )
    replayed = {o.check.name: o.result.replayed_steps for o in items if o.result is not None}
    assert again["passed"] == len(names) and all(replayed[name] > 0 for name in names), replayed
