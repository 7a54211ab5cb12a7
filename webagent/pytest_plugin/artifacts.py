"""What a test leaves on disk: its replay cache file next to it, its run folders in --output.

**The replay cache.** ``tests/test_shop.py::test_checkout[chromium]`` keeps its recordings in
``tests/__webagent_cache__/test_shop/test_checkout[chromium].json`` (a test of a class,
``TestCart::test_checkout[chromium]``, in ``TestCart.test_checkout[chromium].json``): the same ``ReplayCache`` file
as ``webagent test --cache`` (stable, diffable JSON, written atomically and only when a recording
changed). An unchanged site replays the recorded steps and answers with no model call; a changed
one is re-planned from the first step that differs, and the recording heals when the test passes.
One file per test keeps ``pytest -n`` safe without locks: a test runs in one worker at a time, and
a file is only ever replaced whole (``write_atomic``), so a reader never sees half of one. Modes
(``--webagent-cache``): ``auto`` replays and records; ``read`` replays and never writes (CI that
must not change the committed files); ``write`` ignores what is recorded and records anew; ``off``
uses no cache.

**Run folders.** Each ``act``, ``check`` and ``extract`` writes a run directory (``report.html``,
``trajectory.jsonl``, screenshots, ``result.json``) under ``<--output>/<test>/webagent/``, where
pytest-playwright keeps the test's trace, screenshots and video (its ``output_path`` fixture). With
``--webagent-runs retain-on-failure`` (the default) they are removed again when the test passes;
``on`` keeps them, ``off`` writes none.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ..files.disk import cut_utf8
from ..records import Fingerprint
from ..replay import ReplayCache, StepReplay, origin_of
from .options import REPORTS, CacheMode, RunsMode

__all__ = [
    "CACHE_DIR",
    "REPORTS",
    "RUNS_DIR",
    "KeptReports",
    "ReadOnlyCache",
    "RecordingCache",
    "RunFolder",
    "cache_path",
    "display_path",
    "item_failed",
    "node_name",
    "open_cache",
]


CACHE_DIR = "__webagent_cache__"
_UNSAFE = re.compile(r"[^\w.\-\[\]=,+]")
_MAX_NAME = 120


def _file_name(name: str) -> str:
    """A file name for a test name (parameters included), the same on every system, at most
    ``_MAX_NAME`` bytes before its suffix (a name of a non-Latin script is cut by bytes)."""
    safe = _UNSAFE.sub("_", name)
    if len(safe.encode()) > _MAX_NAME or safe != name:  # bytes: what a file system limits
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{cut_utf8(safe, _MAX_NAME - 9)}-{digest}"
    return safe + ".json"


def node_name(item: pytest.Item) -> str:
    """The test's node id without its file: ``TestCart::test_checkout[chromium]`` (classes and
    parameters included, so that same-named tests of two classes are told apart)."""
    chain = item.listchain()
    files = [i for i, node in enumerate(chain) if isinstance(node, pytest.File)]
    if not files:
        return item.name
    return "::".join(node.name for node in chain[files[-1] + 1 :])


def cache_path(test_file: Path, test_name: str) -> Path:
    """Where the recordings of ``test_name`` (``node_name``: ``TestCart::test_checkout[chromium]``)
    in ``test_file`` are kept: the classes joined to the test's name with dots
    (``TestCart.test_checkout[chromium].json``), other unsafe characters replaced (and the name then
    made distinct with a digest)."""
    head, bracket, params = test_name.partition("[")
    return test_file.parent / CACHE_DIR / test_file.stem / _file_name(head.replace("::", ".") + bracket + params)


class ReadOnlyCache(ReplayCache):
    """Replays what the file holds and never writes it (``--webagent-cache read``)."""

    def save(self) -> None:
        return None


class RecordingCache(ReplayCache):
    """Replays nothing and records every successful call anew (``--webagent-cache write``)."""

    def replay_for(
        self, key: str, *, goal: str, url: str, expect: str | None = None, any_origin: bool = False
    ) -> StepReplay:
        return StepReplay(origin=origin_of(url))

    def answer_for(self, key: str, seen: Fingerprint, *, url: str, any_origin: bool = False) -> Any:
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


RUNS_DIR = "webagent"
#: The phase reports of a test item (setup, call, teardown), stored by the plugin's hook.


def display_path(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` (where pytest was started) when it is inside it, else absolute."""
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path.resolve())


def item_failed(item: pytest.Item) -> bool:
    """Whether the test failed so far: setup or call (a fixture's teardown is not known yet)."""
    reports = item.stash.get(REPORTS, {})
    return any(report.failed for report in reports.values()) or "call" not in reports


class RunFolder:
    """Where the run directories of one test go, and what becomes of them at its end."""

    def __init__(self, output_path: str | Path, mode: RunsMode, invocation_dir: Path) -> None:
        self.mode = mode
        self.test_dir = Path(output_path)
        self.invocation_dir = invocation_dir
        self._test_dir_existed = self.test_dir.exists()

    @property
    def output_dir(self) -> Path | None:
        """The directory the pilot writes its runs in (None: no run directories)."""
        return None if self.mode == "off" else self.test_dir / RUNS_DIR

    def report(self, run_dir: Path | None) -> str | None:
        """The path of a run's ``report.html`` to show, if there is one."""
        if run_dir is None:
            return None
        report = run_dir / "report.html"
        return display_path(report, self.invocation_dir) if report.is_file() else None

    def finish(self, failed: bool) -> list[Path]:
        """At the test's end: the reports kept (failed, or ``on``), the directories removed otherwise."""
        root = self.test_dir / RUNS_DIR
        if not root.is_dir():
            return []
        if failed or self.mode == "on":
            return sorted(root.glob("*/report.html"))
        shutil.rmtree(root, ignore_errors=True)
        if not self._test_dir_existed:
            with contextlib.suppress(OSError):  # the test's folder, when nothing else (a trace, a video) is in it
                self.test_dir.rmdir()
        return []


class KeptReports:
    """Lists the run reports kept for failed tests at the end of the terminal summary (the
    controller gets them from xdist's workers through the teardown reports' ``user_properties``)."""

    def __init__(self) -> None:
        self.failed: set[str] = set()
        self.kept: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.add(report.nodeid)
        if report.when == "teardown" and report.nodeid in self.failed:
            self.kept += [(report.nodeid, str(v)) for k, v in report.user_properties if k == "webagent_report"]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.kept:
            terminalreporter.section("webagent reports of failed tests")
            for nodeid, report in self.kept:
                terminalreporter.line(f"{nodeid}: {report}")
