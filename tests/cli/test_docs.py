"""docs/cli.md is the rendered --help of every command."""

from __future__ import annotations

from pathlib import Path

from webagent.cli.docs import render_cli_docs

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_cli_reference_matches_help() -> None:
    assert DOC.read_text(encoding="utf-8") == render_cli_docs(), (
        "docs/cli.md is out of date: run `python -m webagent.cli.docs > docs/cli.md`"
    )


def test_every_run_option_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    for flag in ("--url", "--goal", "--json", "--config", "--output", "--base-url"):
        assert flag in text
    for role in ("policy", "localizer", "validator"):
        for field in ("base-url", "model", "api-key", "temperature", "max-tokens", "timeout-s"):
            assert f"--{role}-{field}" in text
