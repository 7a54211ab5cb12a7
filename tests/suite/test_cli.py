"""``webagent test``'s own checks, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

import webagent.batch.ray as raybatch
import webagent.suite.cli as suitecli
from webagent.cli.parser import build_parser, config_from_args
from webagent.errors import InputError
from webagent.suite.cli import run_test


def test_a_suite_budget_with_ray_is_one_line_of_error_before_ray_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_ray() -> None:
        raise AssertionError("Ray was started")

    monkeypatch.setattr(raybatch, "import_ray", no_ray)
    suite = tmp_path / "suite.yaml"
    suite.write_text("checks:\n  - {name: a, url: 'http://127.0.0.1:9/', goal: g}\n")
    flags = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--output", str(tmp_path / "out")]
    args = build_parser().parse_args(["test", str(suite), "--ray", "--suite-budget-calls", "5", *flags])
    with pytest.raises(InputError, match="cannot span Ray's actors") as info:
        run_test(args, config_from_args(args))
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()


def test_a_suite_name_of_400_bytes_gets_a_default_output_folder_of_a_safe_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default ``--output`` is named after the suite: cut by bytes, not characters (100 letters
    of a 4-byte script were a 400-byte name: ``OSError: File name too long`` once written)."""
    monkeypatch.chdir(tmp_path)
    given: list[Path] = []

    async def stop_here(config: object, suite: object, output: Path, **kwargs: object) -> None:
        given.append(output)
        raise InputError("stopped before running")

    monkeypatch.setattr(suitecli, "run_suite", stop_here)
    suite = tmp_path / "suite.yaml"
    name = "\U0001d400" * 100
    suite.write_text(f"name: {name}\nchecks:\n  - {{name: a, url: 'http://127.0.0.1:9/', goal: g}}\n", encoding="utf-8")
    args = build_parser().parse_args(["test", str(suite), "--base-url", "http://127.0.0.1:9/v1", "--model", "m"])
    with pytest.raises(InputError, match="stopped before running"):
        run_test(args, config_from_args(args))
    [output] = given
    assert output.parent == Path("webagent-test") and output.name.startswith("\U0001d400" * 25)
    assert len(output.name.encode()) <= 100
    output.mkdir(parents=True)  # a name the file system takes
