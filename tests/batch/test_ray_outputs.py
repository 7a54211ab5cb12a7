"""``batch --ray`` with ``--output s3://...``, against moto's S3 server on loopback and a local Ray
head of 2 CPUs: the actors' run folders reach the store whether the actors write them under the
driver's staging folder (one node) or send them back with their lines (``ship_runs``, as on a
cluster of several nodes), the driver keeps the one ``results.jsonl``, and a second run against
the same URL skips the ids already finished. On a cluster of 2 nodes (``ray.cluster_utils``, each
with a TMPDIR of its own) the runs are shipped even where the caller says its nodes share a disk
(``ship_runs=False``): the staging folder of a URL output is the driver's alone."""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.batch import BatchRunner, RayCluster, read_results
from webagent.testing.server import FakeModelServer

from ..conftest import make_config
from .test_outputs import BUCKET, keys, s3  # noqa: F401 (the S3 server fixture)
from .test_ray import RAY_ENV, cluster, specs  # noqa: F401 (the Ray head fixture)
from .test_ray_nodes import NODE

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")
fsspec = pytest.importorskip("fsspec")

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def store(s3: str, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811 (the fixture above)
    """fsspec's S3 pointed at the moto server (as FSSPEC_S3_ENDPOINT_URL does, read at import), with
    boto's credentials in the environment."""
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": s3})
    for key, value in {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    return s3


@pytest.mark.parametrize("ship", [False, True], ids=["actors-write-staging", "runs-shipped"])
def test_a_ray_batch_to_s3_puts_every_run_in_the_store_and_resumes_from_it(
    ship: bool,
    store: str,
    cluster: str,  # noqa: F811
    slow_model: FakeModelServer,
    local_tasks: dict[str, Any],
    tmp_path: Path,
) -> None:
    prefix = f"ray-{'shipped' if ship else 'staged'}"
    url = f"s3://{BUCKET}/{prefix}"
    everything = specs(local_tasks)
    ray_ = RayCluster(address=cluster, actors=2, ship_runs=ship)

    first = BatchRunner(make_config(slow_model), everything[:2], url, concurrency=1, ray=ray_)
    asyncio.run(first.run())
    assert first.pool is not None and first.pool.ship is ship
    remote = keys(store, prefix)
    before = remote["results.jsonl"]
    lines = [json.loads(line) for line in before.decode().splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(t.id for t in everything[:2])
    for line in lines:  # every line's run folder is in the store, its screenshots too
        folder = line["attempt_records"][0]["output_dir"]
        assert f"{folder}/result.json" in remote and f"{folder}/trajectory.jsonl" in remote
        assert any(name.startswith(folder + "/") and name.endswith(".jpg") for name in remote)

    again = BatchRunner(make_config(slow_model), everything, url, concurrency=1, ray=ray_)
    stats = asyncio.run(again.run())
    assert stats.resumed == 2 and stats.finished_now == len(everything) - 2  # the finished ids were skipped
    remote = keys(store, prefix)
    after = remote["results.jsonl"]
    assert after.startswith(before)  # the first run's lines kept as they were
    lines = [json.loads(line) for line in after.decode().splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(t.id for t in everything)  # one line each
    for line in lines:
        assert f"{line['attempt_records'][0]['output_dir']}/result.json" in remote
    assert {r.id for r in read_results(again.output)} == {t.id for t in everything}  # the driver's own copy


@pytest.fixture
def two_nodes() -> Iterator[Any]:
    """A head and one worker node of one CPU each, each with a TMPDIR of its own."""
    root = Path(tempfile.mkdtemp(prefix="wa-s3-nodes-"))
    with pytest.MonkeyPatch.context() as mp:
        for key, value in RAY_ENV.items():
            mp.setenv(key, value)
        mp.setattr(ray._private.ray_constants, "ENABLE_RAY_CLUSTER", False)
        nodes = None
        try:
            (root / "head").mkdir()
            (root / "worker").mkdir()
            head = {**NODE, "env_vars": {"TMPDIR": str(root / "head")}}
            nodes = cluster_utils.Cluster(initialize_head=True, head_node_args=head, shutdown_at_exit=False)
            nodes.add_node(**NODE, env_vars={"TMPDIR": str(root / "worker")})
            yield nodes
        finally:
            if ray.is_initialized():
                ray.shutdown()
            if nodes is not None:
                nodes.shutdown()
            shutil.rmtree(root, ignore_errors=True)


def test_on_two_nodes_a_url_output_ships_the_runs_even_when_told_the_disk_is_shared(
    store: str,
    two_nodes: Any,
    slow_model: FakeModelServer,
    local_tasks: dict[str, Any],
    tmp_path: Path,
) -> None:
    prefix = "ray-two-nodes"
    tasks = specs(local_tasks)[:3]
    ray_ = RayCluster(address=two_nodes.address, actors=2, ship_runs=False)
    runner = BatchRunner(make_config(slow_model), tasks, f"s3://{BUCKET}/{prefix}", concurrency=1, ray=ray_)
    asyncio.run(asyncio.wait_for(runner.run(), 240))
    assert runner.pool is not None and runner.pool.ship is True
    remote = keys(store, prefix)
    lines = [json.loads(line) for line in remote["results.jsonl"].decode().splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(t.id for t in tasks)
    for line in lines:
        folder = line["attempt_records"][0]["output_dir"]
        assert f"{folder}/result.json" in remote and f"{folder}/trajectory.jsonl" in remote
