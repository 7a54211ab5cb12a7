"""``batch --ray`` on a cluster of 3 Ray nodes on this machine (``ray.cluster_utils.Cluster``), one of
them removed mid-batch: every task ends once with one line, the lost node's task runs again on the
others and is counted as retried, the run directories reach the driver from each node's own folder
(no shared disk: each node has a TMPDIR of its own), and the browser hosts' counts are the sum of
every actor's."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.batch import BatchRunner, BatchStats, RayCluster, read_results
from webagent.batch.summary import summarize
from webagent.config import AgentConfig, BrowserConfig
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..browser.fleetplugin import LoopbackChromiums
from ..conftest import load_task_script, make_config
from .test_ray import RAY_ENV
from .test_runner import slow_copies, task_file

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: Each node's resources: one CPU (one actor), a small object store, no dashboard.
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False}


@pytest.fixture
def nodes() -> Iterator[tuple[Any, list[Path]]]:
    """A head and 2 worker nodes, each with a TMPDIR of its own (where its actor writes its runs)."""
    root = Path(tempfile.mkdtemp(prefix="wa-nodes-"))
    tmp = [root / f"node-{i}" for i in range(3)]
    with pytest.MonkeyPatch.context() as mp:
        for key, value in RAY_ENV.items():
            mp.setenv(key, value)
        mp.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)
        cluster = None
        try:
            for folder in tmp:
                folder.mkdir()
            head = {**NODE, "env_vars": {"TMPDIR": str(tmp[0])}}
            cluster = cluster_utils.Cluster(initialize_head=True, head_node_args=head, shutdown_at_exit=False)
            for folder in tmp[1:]:
                cluster.add_node(**NODE, env_vars={"TMPDIR": str(folder)})
            yield cluster, tmp
        finally:
            if ray.is_initialized():
                ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def hosts() -> Iterator[LoopbackChromiums]:
    """Two browser hosts (Chromium on loopback ports) that every actor's pool connects to."""
    chromiums = LoopbackChromiums({"hosts": 2, "sessions": 4, "hardened": True})
    try:
        for name in ("host-0", "host-1"):
            asyncio.run(chromiums.start(name))
        yield chromiums
    finally:
        for name in list(chromiums.processes):
            chromiums.kill(name)
        with contextlib.suppress(OSError):
            chromiums._dir.cleanup()


def on_hosts(config: AgentConfig, chromiums: LoopbackChromiums) -> AgentConfig:
    listed = [{"url": f"http://127.0.0.1:{chromiums.ports[n]}", "sessions": 4, "name": n} for n in chromiums.ports]
    fleet = {"provider": "hosts", "hosts": listed, "probe_interval_s": 0.5, "probe_timeout_s": 2.0}
    config.browser = BrowserConfig.model_validate({**config.browser.model_dump(exclude_unset=True), **fleet})
    return config


def test_a_node_removed_mid_batch_its_task_runs_again_and_every_run_reaches_the_driver(
    nodes: tuple[Any, list[Path]], hosts: LoopbackChromiums, site: SiteServer, tmp_path: Path
) -> None:
    cluster, node_tmp = nodes
    ids = [f"slow-{i}" for i in range(6)]
    tasks = task_file(tmp_path / "t.jsonl", slow_copies(site, *ids))
    out = tmp_path / "out"
    where: dict[int, str] = {}  # id of an actor's slot -> "node-id folder"
    removed: list[str] = []
    workers = {node.node_id: node for node in cluster.worker_nodes}

    def on_update(stats: BatchStats) -> None:
        actors = runner.pool.actors if runner.pool is not None else []
        busy = [s for s in actors if s.in_flight]
        if not where and len(busy) == 3:
            where.update(zip(map(id, actors), ray.get([s.handle.node.remote() for s in actors]), strict=True))
        if where and stats.finished_now >= 1 and not removed:
            victims = [s for s in busy if where.get(id(s), " ").split()[0] in workers]
            if victims:
                node_id = where[id(victims[0])].split()[0]
                removed.append(node_id)
                cluster.remove_node(workers[node_id])

    script = {**load_task_script("local"), "latency_s": {"policy": 0.2}}
    server = FakeModelServer(script)
    server.start_in_thread()
    try:
        config = on_hosts(make_config(server), hosts)
        cluster_ = RayCluster(address=cluster.address, actors=3)
        runner = BatchRunner(config, tasks, out, concurrency=1, on_update=on_update, ray=cluster_)
        stats = asyncio.run(asyncio.wait_for(runner.run(), 240))  # a batch that waits on a lost node fails, not hangs
    finally:
        server.stop_thread()

    assert removed, "no node was removed while it ran a task"
    results = {r.id: r for r in read_results(out)}
    assert sorted(results) == sorted(ids) and all(r.success for r in results.values())
    assert len((out / "results.jsonl").read_text().splitlines()) == len(ids)  # one line each
    assert runner.pool is not None and runner.pool.ship  # several nodes: runs sent back
    assert runner.pool.actor_deaths >= 1 and stats.retried >= 1  # the lost node's task, run again elsewhere

    # Each actor wrote under its own node's TMPDIR, never under the driver's output ...
    folders = [Path(w.split(maxsplit=1)[1]) for w in where.values()]
    assert len(folders) == 3 and all(any(f.is_relative_to(t) for t in node_tmp) for f in folders)
    assert len({next(t for t in node_tmp if f.is_relative_to(t)) for f in folders}) == 3  # one per node
    # ... and the driver's output holds every task's run directory, sent back with its line.
    for r in results.values():
        for attempt in r.attempt_records:
            assert (out / attempt.output_dir / "result.json").is_file(), attempt.output_dir
            assert any((out / attempt.output_dir).glob("*.png")) or any((out / attempt.output_dir).iterdir())

    # The hosts' counts: every actor's sessions, the lost one's as of its last line, added up.
    summary = summarize(list(results.values()), stats, config, attempts=1)
    counted = summary.run.browser_hosts
    assert sorted(counted) == ["host-0", "host-1"], counted
    sessions = sum(h.sessions for h in counted.values())
    assert len(ids) <= sessions <= len(ids) + stats.retried
    assert all(h.step_latency_p50_s is not None for h in counted.values() if h.sessions)
