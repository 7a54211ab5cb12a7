"""A batch whose ``--output`` is an S3 URL, against a real S3-compatible server started here on
loopback (moto's server mode) and the real ``webagent batch`` command: the same files as a local
batch, a driver killed with ``kill -9`` and resumed skips the tasks it finished, and a bad URL, a
missing bucket or an endpoint that does not answer is one line, not a traceback."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer, data_dir

boto3 = pytest.importorskip("boto3")
moto_server = pytest.importorskip("moto.server")
pytest.importorskip("s3fs")

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

BUCKET = "webagent-runs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """moto's S3 server on a loopback port, with one bucket; its endpoint URL."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        client(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        server.stop()


def client(endpoint: str) -> Any:
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )


def keys(endpoint: str, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix/``, by its path below it."""
    s3 = client(endpoint)
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for item in page.get("Contents", []):
            body = s3.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
            found[item["Key"][len(prefix) + 1 :]] = body
    return found


def task_file(site: SiteServer, path: Path) -> Path:
    text = (data_dir() / "local.jsonl").read_text(encoding="utf-8").replace("{base}", site.url)
    path.write_text(text, encoding="utf-8")
    return path


def command(tasks: Path, output: str, model: FakeModelServer) -> list[str]:
    cmd = [sys.executable, "-m", "webagent", "batch", str(tasks), "--output", output, "--concurrency", "1"]
    cmd += ["--trust-tasks", "-q", "--api-key", "offline", "--localizer-profile", "holo1.5"]
    cmd += ["--model", PROFILE_MODELS["holo1.5"]]
    for role in ("policy", "localizer", "validator"):
        cmd += [f"--{role}-base-url", model.base_url(role)]
    return cmd


def environment(endpoint: str) -> dict[str, str]:
    """How a user points fsspec's S3 at a server of their own: the storage option as FSSPEC_S3_*, the
    credentials as AWS_* (boto's own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WEBAGENT_", "AWS_", "FSSPEC_"))}
    env.update(
        FSSPEC_S3_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="k",
        AWS_SECRET_ACCESS_KEY="s",
        AWS_DEFAULT_REGION="us-east-1",
    )
    return env


def run(cmd: list[str], env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def comparable(line: dict[str, Any]) -> dict[str, Any]:
    """What a result line says about its task, without its timings."""
    records = [(r["attempt"], r["success"], r["answer"], r["steps"], r["output_dir"]) for r in line["attempt_records"]]
    return {"id": line["id"], "success": line["success"], "answer": line["answer"], "records": records}


def local_files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_an_s3_batch_leaves_the_same_files_as_a_local_one(
    s3: str, site: SiteServer, slow_model: FakeModelServer, tmp_path: Path
) -> None:
    tasks = task_file(site, tmp_path / "tasks.jsonl")
    env = environment(s3)
    local = tmp_path / "local"
    done = run(command(tasks, str(local), slow_model), env)
    assert done.returncode == 0, done.stderr[-3000:]
    done = run(command(tasks, f"s3://{BUCKET}/same", slow_model), env)
    assert done.returncode == 0, done.stderr[-3000:]
    remote = keys(s3, "same")
    assert set(remote) == local_files(local)
    assert any(name.startswith("runs/") and name.endswith(".jpg") for name in remote)  # screenshots too
    lines = [json.loads(line) for line in remote["results.jsonl"].decode().splitlines()]
    here = [json.loads(line) for line in (local / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 5
    assert sorted(map(comparable, lines), key=str) == sorted(map(comparable, here), key=str)
    for line in lines:  # every line's run files are there
        assert f"{line['attempt_records'][0]['output_dir']}/result.json" in remote
    assert json.loads(remote["summary.json"])["finished"] == 5


def test_a_driver_killed_and_resumed_against_s3_skips_the_finished_tasks(
    s3: str, site: SiteServer, slow_model: FakeModelServer, tmp_path: Path
) -> None:
    tasks = task_file(site, tmp_path / "tasks.jsonl")
    env = environment(s3)
    url = f"s3://{BUCKET}/killed"
    proc = subprocess.Popen(command(tasks, url, slow_model), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 150
        before: list[str] = []
        while proc.poll() is None and time.monotonic() < deadline:
            results = keys(s3, "killed").get("results.jsonl", b"")
            before = [line for line in results.decode().splitlines() if line.strip()]
            if 1 <= len(before) < 5:
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the batch ended before it could be killed"
        assert 1 <= len(before) < 5
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    before = [line for line in keys(s3, "killed")["results.jsonl"].decode().splitlines() if line.strip()]
    finished = {json.loads(line)["id"]: line for line in before}
    done = run(command(tasks, url, slow_model), env)
    assert done.returncode == 0, done.stderr[-3000:]
    remote = keys(s3, "killed")
    after = [line for line in remote["results.jsonl"].decode().splitlines() if line.strip()]
    by_id = {json.loads(line)["id"]: line for line in after}
    assert len(after) == len(by_id) == 5  # one line per task
    for task_id, line in finished.items():  # the finished tasks were not run again: their lines as they were
        assert by_id[task_id] == line
    summary = json.loads(remote["summary.json"])
    assert summary["run"]["tasks_resumed"] == len(finished)
    assert summary["run"]["tasks_finished"] == 5 - len(finished)


@pytest.mark.parametrize(
    ("output", "endpoint", "code", "says"),
    [
        ("nope://bucket/x", "s3", 2, "unknown storage protocol 'nope'"),
        (f"s3://no-such-{BUCKET}/x", "s3", 2, f"no bucket or folder 'no-such-{BUCKET}'"),
        (f"s3://{BUCKET}/x", "closed", 1, "the store did not answer"),
    ],
)
def test_a_bad_output_is_one_line(
    s3: str,
    site: SiteServer,
    slow_model: FakeModelServer,
    tmp_path: Path,
    output: str,
    endpoint: str,
    code: int,
    says: str,
) -> None:
    tasks = task_file(site, tmp_path / "tasks.jsonl")
    env = environment(s3 if endpoint == "s3" else f"http://127.0.0.1:{free_port()}")
    done = run(command(tasks, output, slow_model), env, timeout=120)
    assert done.returncode == code, done.stderr[-3000:]
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, errors


def test_a_single_run_to_s3_leaves_the_same_files_as_a_local_one(
    s3: str, site: SiteServer, slow_model: FakeModelServer, tmp_path: Path
) -> None:
    task = json.loads(task_file(site, tmp_path / "tasks.jsonl").read_text().splitlines()[0])
    cmd = command(tmp_path / "tasks.jsonl", "", slow_model)
    flags = cmd[cmd.index("--api-key") :]
    base = [sys.executable, "-m", "webagent", "run", "--url", task["url"], "--goal", task["goal"], *flags]
    env = environment(s3)
    local = tmp_path / "one"
    done = run([*base, "--output", str(local)], env)
    assert done.returncode == 0, done.stderr[-3000:]
    done = run([*base, "--output", f"s3://{BUCKET}/one"], env)
    assert done.returncode == 0, done.stderr[-3000:]
    remote = keys(s3, "one")
    assert set(remote) == local_files(local)
    assert json.loads(remote["result.json"])["success"] is True
