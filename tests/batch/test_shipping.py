"""A task's run directory packed on an actor's node and put in place under the driver's output: the
same files arrive, an abandoned run's folder is replaced, a folder too large stays where it is, and a
packed folder that reaches outside its task's folder is refused (the driver trusts no path it gets)."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest

from webagent.batch.shipping import ShippingError, node_output, pack, ships_runs, unpack
from webagent.tasks import run_dir_name


def make_run(output: Path, task_id: str) -> Path:
    folder = output / "runs" / run_dir_name(task_id) / "attempt-1"
    (folder / "steps").mkdir(parents=True)
    (folder / "result.json").write_text('{"success": true}')
    (folder / "steps" / "001.png").write_bytes(bytes(range(256)) * 40)
    return folder


def test_a_run_directory_travels_whole_and_leaves_the_node(tmp_path: Path) -> None:
    node = node_output()
    assert not node.is_relative_to(tmp_path)  # the node's own folder, not the driver's
    make_run(node, "a/b")
    data = pack(node, "a/b")
    assert data is not None
    assert not any((node / "runs").iterdir())  # removed there once packed
    driver = tmp_path / "out"
    stale = driver / "runs" / run_dir_name("a/b") / "attempt-2"
    stale.mkdir(parents=True)  # an abandoned run's folder
    unpack(data, driver, "a/b")
    got = driver / "runs" / run_dir_name("a/b") / "attempt-1"
    assert (got / "result.json").read_text() == '{"success": true}'
    assert (got / "steps" / "001.png").read_bytes() == bytes(range(256)) * 40
    assert not stale.exists()
    shutil.rmtree(node)


def test_no_run_directory_is_nothing_to_send(tmp_path: Path) -> None:
    assert pack(tmp_path, "never-ran") is None


def test_a_folder_over_the_limit_stays_on_its_node(tmp_path: Path) -> None:
    folder = make_run(tmp_path, "big")
    assert pack(tmp_path, "big", limit=100) is None
    assert (folder / "result.json").is_file()


def tarball(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for info, content in members:
            info.size = len(content) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(content) if info.isfile() else None)
    return buffer.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


@pytest.mark.parametrize(
    "member",
    [
        entry("runs/other/attempt-1/result.json"),  # another task's folder
        entry("runs/t/../../escape.txt"),
        entry("/etc/evil"),
        entry("results.jsonl"),  # the driver's own lines
        entry("runs/t/link", tarfile.SYMTYPE, "/etc/passwd"),
        entry("runs/t/hard", tarfile.LNKTYPE, "results.jsonl"),
    ],
    ids=["other-task", "dotdot", "absolute", "results", "symlink", "hardlink"],
)
def test_a_member_outside_the_tasks_folder_is_refused(tmp_path: Path, member: tarfile.TarInfo) -> None:
    data = tarball((entry("runs/t/attempt-1/result.json"), b"{}"), (member, b"x"))
    with pytest.raises(ShippingError, match="the run files shipped for task 't' hold"):
        unpack(data, tmp_path, "t")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results.jsonl").exists()


def test_bytes_that_are_not_a_tarball_are_one_error(tmp_path: Path) -> None:
    with pytest.raises(ShippingError, match="cannot be unpacked"):
        unpack(b"not a tarball", tmp_path, "t")


@pytest.mark.parametrize(
    ("ship_runs", "nodes", "client", "staged", "ships"),
    [
        (None, 1, False, False, False),  # one node, the driver on it: the actors write DIR themselves
        (None, 3, False, False, True),  # several nodes: no shared disk assumed
        (None, 1, True, False, True),  # a Ray client: the one node is not the driver's machine
        (False, 3, False, False, False),  # a shared disk the caller vouches for
        (True, 1, False, False, True),
        (None, 1, False, True, False),  # a URL output on one node: the actors write the staging folder
        (False, 3, False, True, True),  # a URL output: its staging folder is the driver's alone
        (False, 1, True, True, True),
    ],
)
def test_runs_are_shipped_wherever_the_actors_cannot_reach_the_drivers_folder(
    ship_runs: bool | None, nodes: int, client: bool, staged: bool, ships: bool
) -> None:
    assert ships_runs(ship_runs, nodes, client=client, staged=staged) is ships
