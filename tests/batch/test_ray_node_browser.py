"""``batch --ray`` on a cluster of 2 Ray nodes on this machine (``ray.cluster_utils.Cluster``), 2
actors on each: with ``[browser] node_browser = true`` the actors of a node share one Chromium
(``batch/nodebrowser.py``; by default only from ``AUTO_ACTORS``, where it saves memory), launched by a
small actor pinned to the node, so the batch runs with exactly one Chromium main process per node
and none in the actors; every task ends once with one line. A batch that holds a secret keeps a
Chromium per actor (no DevTools port other local users could reach) and says why. A node's
Chromium killed mid-batch is launched again, the actors' pools take it back, and every task still
ends once, its lost runs re-run as a browser's crash; the node's browser actor itself killed is
replaced on the same port by the driver, and the same holds. The Chromium processes are read from /proc
below each actor while the batch runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from pydantic import SecretStr

from webagent.batch import BatchRunner, BatchStats, RayCluster, read_results
from webagent.batch.nodebrowser import AUTO_ACTORS, node_browser_refusal
from webagent.batch.summary import summarize
from webagent.config import AgentConfig
from webagent.runtime import checked_sessions
from webagent.tasks import TaskSpec
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..conftest import make_config
from ..procs import alive, chromium_mains
from .test_ray import RAY_ENV
from .test_runner import slow_copies, task_file

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")


#: Each node's resources: two CPUs (two actors), a small object store, no dashboard.
NODE = {"num_cpus": 2, "object_store_memory": 80 * 1024 * 1024, "include_dashboard": False}
ACTORS = 4


@contextlib.contextmanager
def _two_nodes() -> Iterator[Any]:
    """A head and one worker node, two actors' room on each."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in RAY_ENV.items():
            mp.setenv(key, value)
        mp.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)
        cluster = cluster_utils.Cluster(initialize_head=True, head_node_args=NODE, shutdown_at_exit=False)
        try:
            cluster.add_node(**NODE)
            yield cluster
        finally:
            if ray.is_initialized():
                ray.shutdown()
            cluster.shutdown()


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[str]:
    with _two_nodes() as cluster:
        yield cluster.address


class Watch:
    """The Chromium main processes seen below the actors of a running batch: each task actor's, and
    each node browser's (``RayPool.nodes``, where there is one)."""

    def __init__(self) -> None:
        self.runner: BatchRunner | None = None
        self.actors: dict[int, str] = {}  # pid -> "actor" or "node"
        self.seen: dict[int, tuple[str, int]] = {}  # Chromium pid -> (kind, pid of the actor above it)
        self.done = False

    def on_update(self, stats: BatchStats) -> None:
        pool = self.runner.pool if self.runner is not None else None
        if pool is None or stats.phase != "run" or self.actors:
            return
        self.actors = dict.fromkeys(ray.get([s.handle.pid.remote() for s in pool.actors]), "actor")
        nodes = getattr(pool, "nodes", None)
        if nodes is not None:
            self.actors |= dict.fromkeys(ray.get([h.pid.remote() for h in nodes.handles.values()]), "node")

    async def watch(self) -> None:
        before: set[int] = set()
        while not self.done:
            now: set[int] = set()
            for pid, kind in list(self.actors.items()):
                for main in chromium_mains(pid):
                    now.add(main)
                    # Seen twice, 50 ms apart: a child just forked still has its parent's command line.
                    if main in before and main not in self.seen:
                        self.seen[main] = (kind, pid)
            before = now
            await asyncio.sleep(0.05)

    def run(self, runner: BatchRunner) -> BatchStats:
        self.runner = runner

        async def go() -> BatchStats:
            watcher = asyncio.create_task(self.watch())
            try:
                return await asyncio.wait_for(runner.run(), 400)  # a batch that waits on a lost browser fails
            finally:
                self.done = True
                await watcher

        return asyncio.run(go())


def _batch(
    config: AgentConfig, site: SiteServer, tmp_path: Path, count: int, **kwargs: Any
) -> tuple[Watch, BatchRunner]:
    tasks = task_file(tmp_path / "t.jsonl", slow_copies(site, *(f"slow-{i}" for i in range(count))))
    config.browser.node_browser = kwargs.pop("share", True)  # true: on nodes of 2 actors (auto: of AUTO_ACTORS)
    config = checked_sessions(config, (task.browser for task in tasks))  # as webagent batch does
    watch = Watch()
    ray_cluster = RayCluster(address=kwargs.pop("address"), actors=ACTORS)
    runner = BatchRunner(config, tasks, tmp_path / "out", concurrency=1, on_update=watch.on_update, ray=ray_cluster)
    return watch, runner


def _one_line_each(out: Path, count: int) -> None:
    results = {r.id: r for r in read_results(out)}
    assert sorted(results) == sorted(f"slow-{i}" for i in range(count))
    assert all(r.success for r in results.values()), [
        (r.id, r.stop_reason, r.message, r.infrastructure) for r in results.values() if not r.success
    ]
    assert len((out / "results.jsonl").read_text().splitlines()) == count


@pytest.mark.browser
@pytest.mark.slow
def test_the_actors_of_a_node_share_one_chromium(
    two_nodes: str, slow_model: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    watch, runner = _batch(make_config(slow_model), site, tmp_path, 8, address=two_nodes)
    stats = watch.run(runner)

    _one_line_each(tmp_path / "out", 8)
    assert len([k for k in watch.actors.values() if k == "actor"]) == ACTORS
    # Exactly one Chromium per node, below each node's browser actor; none in the task actors.
    assert len(watch.seen) == 2, watch.seen
    assert sorted(kind for kind, _ in watch.seen.values()) == ["node", "node"]
    assert len({actor for _, actor in watch.seen.values()}) == 2  # one under each node's actor
    # Each node's actors reached it as a browser host: both used, their sessions counted.
    summary = summarize(list(read_results(tmp_path / "out")), stats, runner.config, attempts=1)
    hosts = summary.run.browser_hosts
    assert len(hosts) == 2 and all(name.startswith("node-") for name in hosts), hosts
    assert all((h.sessions or 0) >= 1 for h in hosts.values()) and sum(h.sessions or 0 for h in hosts.values()) >= 8
    assert summary.run.ray_browsers == "one per node"


@pytest.mark.browser
@pytest.mark.slow
def test_a_batch_holding_a_secret_keeps_a_chromium_per_actor_and_says_why(
    two_nodes: str, slow_model: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    config = make_config(slow_model)
    config.secrets = {"PIN": SecretStr("node-s3cret")}
    watch, runner = _batch(config, site, tmp_path, 4, address=two_nodes)
    with structlog.testing.capture_logs() as logs:
        stats = watch.run(runner)

    _one_line_each(tmp_path / "out", 4)
    assert sorted(kind for kind, _ in watch.seen.values()) == ["actor"] * ACTORS, watch.seen  # one each
    assert runner.pool is not None and runner.pool.nodes is None
    where = [e["where"] for e in logs if e["event"] == "ray_browsers"]
    assert len(where) == 1 and "secrets or a signed-in state" in where[0], logs  # even with node_browser true
    assert stats.ray_browsers == where[0] and where[0].startswith("one per actor: ")


@pytest.mark.browser
@pytest.mark.slow
def test_by_default_nodes_of_fewer_actors_than_it_saves_memory_for_keep_a_chromium_per_actor(
    two_nodes: str, slow_model: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    """``node_browser = "auto"``: a node's browser actor costs more than 2 actors' Chromiums save."""
    watch, runner = _batch(make_config(slow_model), site, tmp_path, 4, address=two_nodes, share="auto")
    stats = watch.run(runner)

    _one_line_each(tmp_path / "out", 4)
    assert sorted(kind for kind, _ in watch.seen.values()) == ["actor"] * ACTORS, watch.seen
    assert AUTO_ACTORS > 2  # what the node's browser actor costs: more than 2 actors' Chromiums save
    assert stats.ray_browsers.startswith(f"one per actor: fewer than {AUTO_ACTORS} actors on the node"), (
        stats.ray_browsers
    )


@pytest.mark.browser
@pytest.mark.slow
def test_a_node_chromium_killed_mid_batch_is_launched_again_and_every_task_ends_once(
    two_nodes: str, slow_model: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    config = make_config(slow_model)
    config.browser.probe_interval_s = 0.5
    watch, runner = _batch(config, site, tmp_path, 8, address=two_nodes)
    killed: list[int] = []
    on_update = watch.on_update

    def kill_once(stats: BatchStats) -> None:
        on_update(stats)
        node_chromiums = [pid for pid, (kind, _) in watch.seen.items() if kind == "node"]
        if not killed and stats.finished_now >= 1 and node_chromiums:
            killed.append(node_chromiums[0])
            os.kill(node_chromiums[0], signal.SIGKILL)

    runner.on_update = kill_once
    stats = watch.run(runner)

    assert killed, "no node Chromium was killed mid-batch"
    _one_line_each(tmp_path / "out", 8)
    assert runner.pool is not None
    # The killed Chromium's node launched another (a third Chromium below the node actors), no actor its own.
    assert sorted(kind for kind, _ in watch.seen.values()) == ["node"] * 3, watch.seen
    # No actor died: what was lost re-ran as a browser's crash (or set-up crash), in its task's line.
    assert runner.pool.actor_deaths == 0
    reruns = [r.reason for res in read_results(tmp_path / "out") for a in res.attempt_records for r in a.reruns]
    assert set(reruns) <= {"browser_crash", "setup_crash"}, reruns
    assert sum(h.crashes for h in stats.host_counts.values()) >= 1, stats.host_counts


@pytest.mark.browser
@pytest.mark.slow
def test_a_node_browser_actor_killed_mid_batch_is_replaced_on_its_port_and_every_task_ends_once(
    two_nodes: str, slow_model: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    """The node browser actor's own process killed (out of memory, SIGKILL) while its node stays:
    the driver starts another on that node, on the same port, and the node's actors' pools take
    the host back; no task ends as an infrastructure failure."""
    config = make_config(slow_model)
    config.browser.probe_interval_s = 0.5
    watch, runner = _batch(config, site, tmp_path, 8, address=two_nodes)
    killed: list[tuple[int, int, str]] = []  # (node actor, its Chromium, its node)
    asked: set[int] = set()
    on_update = watch.on_update

    def kill_once(stats: BatchStats) -> None:
        on_update(stats)
        nodes = runner.pool.nodes if runner.pool is not None else None
        if nodes is None:
            return
        if killed:  # the replacement's pid, once it answers: its Chromium is looked for below it
            for handle in [h for h in nodes.handles.values() if id(h) not in asked]:
                with contextlib.suppress(Exception):
                    watch.actors[ray.get(handle.pid.remote(), timeout=1)] = "node"
                    asked.add(id(handle))
            return
        seen = [(actor, chromium) for chromium, (kind, actor) in watch.seen.items() if kind == "node"]
        if stats.finished_now >= 1 and seen:
            where = {ray.get(h.pid.remote()): node for node, h in nodes.handles.items()}
            asked.update(id(h) for h in nodes.handles.values())
            actor, chromium = seen[0]
            killed.append((actor, chromium, where[actor]))
            os.kill(actor, signal.SIGKILL)

    runner.on_update = kill_once
    with structlog.testing.capture_logs() as logs:
        stats = watch.run(runner)

    assert killed, "no node browser actor was killed mid-batch"
    actor, chromium, node = killed[0]
    assert not alive(chromium)  # its Chromium went with it
    # Every task ended once, and well: none waited out a lost browser as an infrastructure failure.
    _one_line_each(tmp_path / "out", 8)
    assert runner.pool is not None and runner.pool.actor_deaths == 0
    # A third Chromium, below a new node actor (none below a task actor): the replacement's.
    nodes = {a for kind, a in watch.seen.values() if kind == "node"}
    assert sorted(kind for kind, _ in watch.seen.values()) == ["node"] * 3 and len(nodes) == 3, watch.seen
    assert actor in nodes
    # The node's actors' pools quarantined its host and took it back: it answered on the same port.
    host = stats.host_counts[f"node-{node[:8]}"]
    assert host.quarantines >= 1 and not host.quarantined, stats.host_counts
    events = [e["event"] for e in logs if e["event"].startswith("node_browser_actor_")]
    assert events == ["node_browser_actor_lost", "node_browser_actor_replaced"], events
    assert stats.ray_browsers == "one per node; 1 node browser actor(s) lost and replaced"


def test_which_batches_keep_a_chromium_per_actor(slow_model: FakeModelServer, tmp_path: Path) -> None:
    """Each reason a node's actors may not share a browser, in one line; none for a plain batch."""
    task = TaskSpec(id="t", url="http://127.0.0.1:1/", goal="g")
    state = tmp_path / "state.json"
    state.write_text('{"cookies": [], "origins": []}')
    state.chmod(0o600)
    signed_in = TaskSpec.model_validate(
        {"id": "s", "url": "http://127.0.0.1:1/", "goal": "g", "browser": {"storage_state": str(state)}}
    )

    def why(tasks: list[TaskSpec] = [task], **browser: Any) -> str | None:  # noqa: B006
        config = make_config(slow_model)
        config.browser = config.browser.model_validate({**config.browser.model_dump(exclude_unset=True), **browser})
        return node_browser_refusal(config, tasks)

    assert why() is None
    assert why(node_browser=False) == "[browser] node_browser is false"
    assert why(direct_cdp=False) == "[browser] direct_cdp is false: no DevTools port"
    assert "provider is hosts" in str(why(provider="hosts", hosts=[{"url": "http://127.0.0.1:9222"}]))
    assert "remote browser" in str(why(cdp_endpoint="http://127.0.0.1:9222"))
    assert "secrets or a signed-in state" in str(why([task, signed_in]))
    assert "secrets or a signed-in state" in str(
        why(direct_cdp=True, http_credentials={"username": "u", "password": "p"})
    )
    config = make_config(slow_model)
    config.secrets = {"PIN": SecretStr("pin-1234")}
    assert "secrets or a signed-in state" in str(node_browser_refusal(config, [task]))


@pytest.mark.browser
@pytest.mark.slow
def test_a_node_lost_with_its_browser_every_task_ends_once(
    slow_model: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    """The worker node removed mid-batch takes its 2 actors and its browser with it; their tasks run
    again on the head's actors, on the head's browser (the replacements find no room)."""
    with _two_nodes() as cluster:
        watch, runner = _batch(make_config(slow_model), site, tmp_path, 8, address=cluster.address)
        worker = next(iter(cluster.worker_nodes))
        removed: list[str] = []
        on_update = watch.on_update

        def remove_once(stats: BatchStats) -> None:
            on_update(stats)
            if not removed and stats.finished_now >= 1 and stats.in_flight >= 2:
                removed.append(worker.node_id)
                cluster.remove_node(worker)

        runner.on_update = remove_once
        stats = watch.run(runner)

    assert removed, "the worker node was not removed mid-batch"
    _one_line_each(tmp_path / "out", 8)
    assert runner.pool is not None and runner.pool.actor_deaths >= 1 and stats.retried >= 1
    assert {kind for kind, _ in watch.seen.values()} == {"node"}, watch.seen  # no actor launched its own
