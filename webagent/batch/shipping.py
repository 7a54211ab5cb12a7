"""A task's run directory sent from a Ray actor on another node to the driver, without a shared disk.

The actor writes its runs under a folder of its own node (``node_output``); when a task's line is
ready, ``pack`` makes its ``runs/<task>/`` folder one gzipped tar (bytes, which travel back through
Ray's object store with the line) and removes it there. The driver's ``unpack`` puts it under its
``--output`` in place of what an abandoned run left. A folder larger than ``MAX_SHIPPED_BYTES``
packed stays on the actor's node (the line says where, in the log); nothing else is lost.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

import structlog

from ..errors import WebAgentError
from ..tasks import run_dir_name

__all__ = ["MAX_SHIPPED_BYTES", "ShippingError", "node_output", "pack", "ships_runs", "unpack"]

log = structlog.get_logger("webagent.batch")

#: Packed bytes of one task's run directory that travel to the driver (screenshots, traces).
MAX_SHIPPED_BYTES = 256 * 1024 * 1024


class ShippingError(WebAgentError):
    """A shipped run directory that cannot be put in place (not a tar, or a member outside its folder)."""


def ships_runs(ship_runs: bool | None, nodes: int, *, client: bool, staged: bool) -> bool:
    """Whether the actors send each run directory back to the driver: ``ship_runs`` when given, else
    when they may run off the driver's machine (``nodes`` alive: more than one; ``client``: the
    driver is a Ray client, off the cluster). Where the output is a URL (``staged``: the runs'
    folder is a staging folder of the driver's machine, which no other machine shares) they ship
    whenever they may run elsewhere, whatever ``ship_runs`` says: what they wrote elsewhere would
    never reach the store."""
    elsewhere = nodes > 1 or client
    if staged and elsewhere:
        return True
    return elsewhere if ship_runs is None else ship_runs


def node_output() -> Path:
    """A new folder on this node for an actor's runs (its own disk, not the driver's)."""
    return Path(tempfile.mkdtemp(prefix="webagent-runs-"))


def pack(output: Path, task_id: str, limit: int = MAX_SHIPPED_BYTES) -> bytes | None:
    """The task's ``runs/<task>/`` under ``output`` as a gzipped tar, removed here once packed; None
    when there is none, or when it cannot be read or packs to more than ``limit`` bytes (then it is
    kept here, and a warning names the folder)."""
    name = run_dir_name(task_id)
    folder = output / "runs" / name
    if not folder.is_dir():
        return None
    buffer = io.BytesIO()
    try:
        with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:  # screenshots are compressed already
            tar.add(folder, arcname=f"runs/{name}")
    except OSError as exc:  # a file that cannot be read here: the line still goes back
        log.warning("run_files_left_on_node", task=task_id, folder=str(folder), error=str(exc))
        return None
    if buffer.tell() > limit:
        log.warning("run_files_left_on_node", task=task_id, folder=str(folder), bytes=buffer.tell(), limit=limit)
        return None
    shutil.rmtree(folder, ignore_errors=True)
    return buffer.getvalue()


def unpack(data: bytes, output: Path, task_id: str) -> None:
    """Put a packed ``runs/<task>/`` under ``output``, replacing the folder an abandoned run left.
    Members must be files and folders inside that one folder (Python's ``data`` filter besides)."""
    name = run_dir_name(task_id)
    root = PurePosixPath("runs", name)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            for member in members:
                path = PurePosixPath(member.name)
                if not (member.isfile() or member.isdir()) or ".." in path.parts or (root not in (path, *path.parents)):
                    raise ShippingError(f"the run files shipped for task {task_id!r} hold {member.name!r}")
            folder = output / "runs" / name
            if folder.exists():
                shutil.rmtree(folder)
            tar.extractall(output, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ShippingError(f"the run files shipped for task {task_id!r} cannot be unpacked: {exc}") from None
