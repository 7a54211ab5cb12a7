"""Where downloads are kept and what they are called there (``webagent.files.downloads``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from webagent.files.downloads import MAX_NAME_BYTES, DownloadFolder, TooLarge, safe_name


@pytest.mark.parametrize(
    ("suggested", "expected"),
    [
        ("orders.csv", "orders.csv"),
        ("../../etc/x", "_.._etc_x"),
        ("..\\..\\windows\\x.exe", "_.._windows_x.exe"),
        ("/etc/passwd", "_etc_passwd"),
        (".bashrc", "bashrc"),
        ("...", "download"),
        ("", "download"),
        ("   ", "download"),
        ("a\x00b\x1bc\x7fd\x85e.txt", "a_b_c_d_e.txt"),
        ("line\nbreak\r.txt", "line_break_.txt"),
        ("invoice\u202etxt.exe", "invoice_txt.exe"),  # a right-to-left override would show "exe.txt"
        ("zero\u200bwidth", "zero_width"),
        ("lone\ud800surrogate", "lone_surrogate"),
        ("trailing dot. ", "trailing dot"),
        ("café 東京.pdf", "café 東京.pdf"),
    ],
)
def test_a_suggested_name_is_made_a_safe_file_name(suggested: str, expected: str) -> None:
    assert safe_name(suggested) == expected


def test_a_long_name_is_cut_to_its_byte_limit_keeping_its_extension() -> None:
    name = safe_name("a" * 300 + ".csv")
    assert name.endswith(".csv") and len(name.encode()) == MAX_NAME_BYTES
    wide = safe_name("東" * 300 + ".pdf")  # 3 bytes each: cut by bytes, on a character boundary
    assert wide.endswith(".pdf") and len(wide.encode()) <= MAX_NAME_BYTES and "\ufffd" not in wide
    bare = safe_name("b" * 1000)
    assert bare == "b" * MAX_NAME_BYTES
    odd_extension = safe_name("c" * 300 + "." + "d" * 50)  # not an extension worth keeping whole
    assert len(odd_extension.encode()) == MAX_NAME_BYTES


def test_names_never_collide_and_never_leave_the_folder(tmp_path: Path) -> None:
    folder = DownloadFolder(tmp_path / "run" / "downloads")
    source = tmp_path / "source.bin"
    source.write_bytes(b"x" * 10)
    first = folder.keep_copy(source, "report.csv", 100)
    second = folder.keep_copy(source, "report.csv", 100)
    third = folder.keep_copy(source, "report.csv", 100)
    assert [n for n, _, _ in (first, second, third)] == ["report.csv", "report-2.csv", "report-3.csv"]
    long = folder.keep_copy(source, safe_name("e" * 300), 100)
    again = folder.keep_copy(source, safe_name("e" * 300), 100)
    assert len(again[0].encode()) <= MAX_NAME_BYTES and again[0].endswith("-2") and long[0] != again[0]
    files = sorted(p.name for p in (tmp_path / "run" / "downloads").iterdir())
    assert files == sorted(n for n, _, _ in (first, second, third, long, again))  # no partial left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "source.bin"]


def test_a_file_past_the_limit_is_not_kept(tmp_path: Path) -> None:
    folder = DownloadFolder(tmp_path / "downloads")
    source = tmp_path / "big.bin"
    source.write_bytes(b"x" * 101)
    with pytest.raises(TooLarge):
        folder.keep_copy(source, "big.bin", 100)
    partial = folder.partial()
    partial.write_bytes(b"y" * 101)
    with pytest.raises(TooLarge):
        folder.place(partial, "big.bin", 100)
    assert list((tmp_path / "downloads").iterdir()) == []
    assert folder.keep_copy(source, "big.bin", 101)[2] == 101


def test_a_link_given_as_the_source_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("not yours")
    link = tmp_path / "link"
    link.symlink_to(secret)
    folder = DownloadFolder(tmp_path / "downloads")
    with pytest.raises(OSError):
        folder.keep_copy(link, "x", 100)
    assert list((tmp_path / "downloads").iterdir()) == []


def test_a_name_taken_by_a_link_is_not_written_through(tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    folder = DownloadFolder(tmp_path / "downloads")
    folder.make()
    (tmp_path / "downloads" / "x.txt").symlink_to(target)
    source = tmp_path / "source"
    source.write_bytes(b"new")
    name, path, _ = folder.keep_copy(source, "x.txt", 100)
    assert name == "x-2.txt" and path.read_bytes() == b"new" and not target.exists()


def test_a_temporary_folder_is_private_and_removed(tmp_path: Path) -> None:
    folder = DownloadFolder()
    assert folder.temporary and folder.path is None  # made at the first download only
    source = tmp_path / "s"
    source.write_bytes(b"abc")
    _, path, size = folder.keep_copy(source, "s.txt", 100)
    assert size == 3 and path.parent == folder.path
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700 and stat.S_IMODE(path.stat().st_mode) == 0o600
    folder.remove()
    assert not path.parent.exists() and folder.removed


def test_a_given_folder_keeps_the_umask_unless_private(tmp_path: Path) -> None:
    source = tmp_path / "s"
    source.write_bytes(b"abc")
    mask = os.umask(0)
    os.umask(mask)
    _, plain, _ = DownloadFolder(tmp_path / "plain").keep_copy(source, "s", 10)
    _, private, _ = DownloadFolder(tmp_path / "private", private=True).keep_copy(source, "s", 10)
    assert stat.S_IMODE(private.parent.stat().st_mode) == 0o700 and stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(plain.stat().st_mode) == 0o666 & ~mask
    DownloadFolder(tmp_path / "plain").remove()  # a given folder is the run's: never removed
    assert plain.exists()


def test_a_private_folder_makes_its_parents_private_too(tmp_path: Path) -> None:
    """A run's first download can come before its first step is written: the run directory is then
    made for the downloads folder, and must be its owner's as the run's own files would make it."""
    tmp_path.chmod(0o755)
    source = tmp_path / "s"
    source.write_bytes(b"abc")
    _, kept, _ = DownloadFolder(tmp_path / "runs" / "run" / "downloads", private=True).keep_copy(source, "s", 10)
    for folder in (tmp_path / "runs", tmp_path / "runs" / "run", kept.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    # A folder given without the flag but private already (made by the run): its files are private too.
    inside = tmp_path / "runs" / "run" / "more"
    inside.mkdir(mode=0o700)
    _, also, _ = DownloadFolder(inside).keep_copy(source, "s", 10)
    assert stat.S_IMODE(also.stat().st_mode) == 0o600


def test_a_fenced_folder_keeps_nothing_more_and_is_not_made_again(tmp_path: Path) -> None:
    folder = DownloadFolder(tmp_path / "run" / "downloads")
    folder.fenced = True  # its run was set aside for a re-run in the same directory (RunStream.fence)
    source = tmp_path / "report.csv"
    source.write_text("a,b\n")
    with pytest.raises(OSError, match="set aside"):
        folder.keep_copy(source, "report.csv", 1024)
    assert not (tmp_path / "run").exists()


def test_a_fenced_folder_sweeps_no_partials_its_path_is_the_reruns(tmp_path: Path) -> None:
    old = DownloadFolder(tmp_path / "run" / "downloads")
    partial = old.partial()  # the re-run's download in progress, in the same place
    old.fenced = True
    old.forget_partials()  # the cancelled run's clean-up, late
    assert partial.exists()
    DownloadFolder(tmp_path / "run" / "downloads").forget_partials()  # unfenced: swept
    assert not partial.exists()
