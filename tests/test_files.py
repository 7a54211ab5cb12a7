"""Atomic writes keep normal permissions and leave no temporary files."""

from __future__ import annotations

import os
from pathlib import Path

from webagent.files import write_atomic


def test_write_atomic_mode_and_content(tmp_path: Path) -> None:
    mask = os.umask(0o022)
    try:
        target = write_atomic(tmp_path / "sub" / "f.json", "{}\n")
        write_atomic(target, b"[]\n")  # replaces
    finally:
        os.umask(mask)
    assert target.read_bytes() == b"[]\n"
    assert target.stat().st_mode & 0o777 == 0o644  # readable by a CI user other than the container's
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]
