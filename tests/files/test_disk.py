"""Atomic writes keep normal permissions and leave no temporary files; private ones, and those in a
private folder, are their owner's only; names are cut by bytes."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from webagent.files.disk import cut_utf8, make_dir, open_append, private_folder, write_atomic, write_atomic_parts


def test_write_atomic_mode_and_content(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)  # (pytest makes it 0700: a private folder, whose files are private)
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


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_private_folders_and_files_are_their_owners_only(tmp_path: Path) -> None:
    """What a run holding a secret writes: folders made 0700 (the parents made too), files 0600;
    an existing folder is left as it is (a mounted one is the host's)."""
    tmp_path.chmod(0o755)
    mask = os.umask(0o022)
    try:
        shared = make_dir(tmp_path / "shared")
        run = make_dir(tmp_path / "shared" / "runs" / "task" / "attempt-1", private=True)
        result = write_atomic(run / "result.json", "{}", private=True)
        report = write_atomic(run / "report.html", "<p>")  # in a private folder: private too
        fd = open_append(run / "trajectory.jsonl")
        os.close(fd)
        results = tmp_path / "shared" / "results.jsonl"
        results.write_text("")
        results.chmod(0o644)  # written before, by a run without secrets: made private now
        os.close(open_append(results, private=True))
        plain = write_atomic(tmp_path / "shared" / "summary.json", "{}")
    finally:
        os.umask(mask)
    assert mode(shared) == 0o755 and not private_folder(shared)
    assert [mode(p) for p in (run, run.parent, run.parent.parent)] == [0o700] * 3 and private_folder(run)
    assert mode(result) == mode(report) == mode(run / "trajectory.jsonl") == mode(results) == 0o600
    assert mode(plain) == 0o644


def test_a_file_in_a_private_folder_is_private(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    assert mode(write_atomic(tmp_path / "a.json", "{}")) == 0o600
