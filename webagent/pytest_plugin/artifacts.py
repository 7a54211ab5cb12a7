"""The run directories of a test, in pytest-playwright's output folder for that test.

Each ``act``, ``check`` and ``extract`` writes a run directory (``report.html``,
``trajectory.jsonl``, screenshots, ``result.json``) under ``<--output>/<test>/webagent/``, where
pytest-playwright keeps the test's trace, screenshots and video (its ``output_path`` fixture). With
``--webagent-runs retain-on-failure`` (the default) they are removed again when the test passes;
``on`` keeps them, ``off`` writes none.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest
import structlog

from .options import RunsMode

__all__ = ["REPORTS", "RUNS_DIR", "KeptReports", "RunFolder", "display_path", "item_failed"]

log = structlog.get_logger("webagent.pytest")

RUNS_DIR = "webagent"
#: The phase reports of a test item (setup, call, teardown), stored by the plugin's hook.
REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


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

    def runs(self) -> list[Path]:
        """The run directories written so far, oldest first."""
        root = self.test_dir / RUNS_DIR
        if not root.is_dir():
            return []
        return sorted((p for p in root.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime_ns)

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
