"""The replay cache of a test: one file per test, committed next to the tests.

``tests/test_shop.py::test_checkout[chromium]`` keeps its recordings in
``tests/__webagent_cache__/test_shop/test_checkout[chromium].json``: the same ``ReplayCache`` file
as ``webagent test --cache`` (stable, diffable JSON, written atomically and only when a recording
changed). An unchanged site replays the recorded steps and answers with no model call; a changed
one is re-planned from the first step that differs, and the recording heals when the test passes.

One file per test keeps ``pytest -n`` safe without locks: a test runs in one worker at a time, and
a file is only ever replaced whole (``write_atomic``), so a reader never sees half of one.

Modes (``--webagent-cache``): ``auto`` replays and records; ``read`` replays and never writes (CI
that must not change the committed files); ``write`` ignores what is recorded and records anew;
``off`` uses no cache.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from ..records import Fingerprint
from ..replay import ReplayCache, StepReplay
from .options import CacheMode

__all__ = ["CACHE_DIR", "ReadOnlyCache", "RecordingCache", "cache_path", "open_cache"]

CACHE_DIR = "__webagent_cache__"
_UNSAFE = re.compile(r"[^\w.\-\[\]=,+]")
_MAX_NAME = 120


def _file_name(name: str) -> str:
    """A file name for a test name (parameters included), the same on every system."""
    safe = _UNSAFE.sub("_", name)
    if len(safe) > _MAX_NAME or safe != name:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        safe = f"{safe[: _MAX_NAME - 9]}-{digest}"
    return safe + ".json"


def cache_path(test_file: Path, test_name: str) -> Path:
    """Where the recordings of ``test_name`` (``item.name``, class and parameters included) in
    ``test_file`` are kept."""
    return test_file.parent / CACHE_DIR / test_file.stem / _file_name(test_name)


class ReadOnlyCache(ReplayCache):
    """Replays what the file holds and never writes it (``--webagent-cache read``)."""

    def save(self) -> None:
        return None


class RecordingCache(ReplayCache):
    """Replays nothing and records every successful call anew (``--webagent-cache write``)."""

    def replay_for(self, key: str, *, goal: str, expect: str | None = None) -> StepReplay:
        return StepReplay()

    def answer_for(self, key: str, seen: Fingerprint) -> Any:
        return None


def open_cache(mode: CacheMode, path: Path) -> ReplayCache | None:
    """The cache of one test in ``mode`` (an ``InputError`` names a file that is not a valid cache)."""
    if mode == "off":
        return None
    if mode == "read":
        return ReadOnlyCache(path)
    if mode == "write":
        return RecordingCache(path)
    return ReplayCache(path)
