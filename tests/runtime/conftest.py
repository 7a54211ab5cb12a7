"""The team site (a login with 2FA, an echo page, uploads, frames) and scripts for it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webagent.testing.teamsite import TeamSite


@pytest.fixture(scope="session")
def team_site() -> Iterator[TeamSite]:
    with TeamSite() as site:
        yield site


def script(
    match: str, rules: list[dict[str, Any]], *, elements: dict[str, Any] | None = None, **top: Any
) -> dict[str, Any]:
    """A fake-model script of one task: its policy rules in order (the first that holds answers)."""
    return {"tasks": [{"id": "t", "match": match, "elements": elements or {}, "policy": rules}], **top}


def answer(content: str = "done", **when: Any) -> dict[str, Any]:
    return {"when": when, "action": {"action": "answer", "content": content}}


def act(action: dict[str, Any], **when: Any) -> dict[str, Any]:
    return {"when": when, "action": action}


def everything_written(*folders: Path) -> bytes:
    """Every byte of every file under ``folders``."""
    return b"".join(p.read_bytes() for folder in folders for p in sorted(folder.rglob("*")) if p.is_file())
