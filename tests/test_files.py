"""Atomic writes keep normal permissions and leave no temporary files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from webagent.files import cut_utf8, write_atomic, write_atomic_parts


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


def test_write_atomic_parts_streams_and_a_failure_keeps_the_old_file(tmp_path: Path) -> None:
    target = write_atomic_parts(tmp_path / "report.html", [b"<a>", b"b" * 100_000, b"</a>"])
    assert target.read_bytes() == b"<a>" + b"b" * 100_000 + b"</a>"

    def broken() -> Iterator[bytes]:
        yield b"half a page"
        raise RuntimeError("the renderer failed")

    with pytest.raises(RuntimeError):
        write_atomic_parts(target, broken())
    assert target.read_bytes().startswith(b"<a>")  # readers never see the half-written page
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_cut_utf8_counts_bytes_and_never_splits_a_character() -> None:
    assert cut_utf8("abc", 2) == "ab" and cut_utf8("abc", 3) == "abc"
    assert cut_utf8("\u00e9\u00e9\u00e9", 5) == "\u00e9\u00e9"  # 2 bytes each: never half of one
    assert cut_utf8("\U0001d400" * 100, 100) == "\U0001d400" * 25
    assert cut_utf8("a\ud800b", 3) == "a"  # a lone surrogate counts as its 3 bytes
