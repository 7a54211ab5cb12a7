"""``webagent run``'s own parts: where a run directory is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from webagent.cli.run import IMAGE_VARIABLE, unkept_output


def test_in_the_image_a_run_directory_on_no_mount_says_where_to_mount_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(IMAGE_VARIABLE, raising=False)
    assert unkept_output(tmp_path / "runs" / "demo") is None  # outside webagent's image: nothing to say
    monkeypatch.setenv(IMAGE_VARIABLE, "1")
    note = unkept_output(tmp_path / "runs" / "demo")
    assert note is not None and str(tmp_path / "runs" / "demo") in note
    assert '-v "$PWD/webagent-out:/work"' in note and "\n" not in note
    assert unkept_output(Path("/proc/self/run")) is None  # on a mounted filesystem: kept with it
