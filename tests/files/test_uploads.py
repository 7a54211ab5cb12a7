"""The files ``upload_file`` may name, without a browser: a name opened once, without following a
link, relative to its folder, checked open (a regular file, not too large) and read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import webagent.files.uploads as uploads
from webagent.errors import ActionError
from webagent.files.uploads import AllowedFiles, Upload


def test_an_allowed_file_is_its_bytes_and_type(tmp_path: Path) -> None:
    (tmp_path / "cv.pdf").write_bytes(b"%PDF-1.4")
    (tmp_path / "notes").write_bytes(b"x")
    allowed = AllowedFiles(tmp_path)
    assert allowed.open(" cv.pdf ") == Upload("cv.pdf", "application/pdf", b"%PDF-1.4")
    assert allowed.open("notes").mime_type == "application/octet-stream"
    assert "8 bytes" in repr(allowed.open("cv.pdf")) and "PDF" not in repr(allowed.open("cv.pdf"))


def test_links_dotfiles_folders_and_fifos_are_refused_and_not_offered(tmp_path: Path) -> None:
    (tmp_path / "cv.pdf").write_bytes(b"%PDF-1.4")
    (tmp_path / ".env").write_text("TOKEN=x")
    (tmp_path / "same.pdf").symlink_to(tmp_path / "cv.pdf")  # a link, even inside the folder
    (tmp_path / "out.txt").symlink_to("/etc/hostname")
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "pipe")  # opened without O_NONBLOCK, it would hang the run
    allowed = AllowedFiles(tmp_path)
    assert allowed.names == ["cv.pdf"]
    for name, error in (
        ("same.pdf", "is a link, not a file"),
        ("out.txt", "is a link, not a file"),
        (".env", "not a file you may upload"),
        ("dir", "not a regular file"),
        ("pipe", "not a regular file"),
        ("gone.pdf", "no longer there"),
        ("../cv.pdf", "not a path"),
    ):
        with pytest.raises(ActionError, match=error):
            allowed.open(name)


def test_a_named_file_is_opened_without_following_a_link_put_there_since(tmp_path: Path) -> None:
    mine = tmp_path / "cv.pdf"
    mine.write_bytes(b"%PDF-1.4")
    allowed = AllowedFiles(files=[mine])
    assert allowed.open("cv.pdf").data == b"%PDF-1.4"
    mine.unlink()
    mine.symlink_to("/etc/hostname")  # swapped by someone who can write the folder
    with pytest.raises(ActionError, match="is a link"):
        allowed.open("cv.pdf")


def test_a_file_over_the_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 10 * 1024 * 1024)
    (tmp_path / "big.bin").write_bytes(b"\0" * (10 * 1024 * 1024 + 1))
    with pytest.raises(ActionError, match="larger than 10 MiB, the limit for an upload"):
        AllowedFiles(tmp_path).open("big.bin")
