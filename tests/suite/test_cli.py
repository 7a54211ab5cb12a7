"""``webagent test``'s own checks, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

import webagent.batch.ray as raybatch
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
