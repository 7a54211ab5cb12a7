"""Run directories: trajectory.jsonl (one record per step), screenshot files, result.json, report.html.

A run that holds a secret (``private``: it types secrets, or holds a signed-in state or a password)
gets a directory only its owner can open (0700, with the parents it needs) and files only its
owner can read (0600): its screenshots are of signed-in pages (``webagent.files.disk``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import structlog

from ..files.disk import make_dir, open_append, write_atomic
from ..images import Screenshot as Image
from ..records import RunResult, Step

__all__ = ["RunFiles", "Screenshot", "TrajectoryWriter", "read_trajectory", "record_step", "result_text"]

#: A screenshot to save: its file name in the run directory and the image.
Screenshot = tuple[str, Image]

log = structlog.get_logger("webagent.runs")


class TrajectoryWriter:
    """Writes one run directory as the run goes, so an interrupted run keeps its steps."""

    def __init__(self, directory: str | Path, *, private: bool = False) -> None:
        self.directory = make_dir(directory, private=private)
        self.private = private
        fd = open_append(self.directory / "trajectory.jsonl", private=private)
        self._trajectory = os.fdopen(fd, "a", encoding="utf-8")

    def write_step(self, step: Step) -> None:
        """Save the step's screenshot and append its record (one JSON line, flushed)."""
        self.append(*record_step(step))

    def append(self, line: str, screenshot: Screenshot | None) -> None:
        """Save a screenshot (``record_step``'s) and append a record's line, flushed."""
        if screenshot is not None:
            name, image = screenshot
            write_atomic(self.directory / name, image.data(), private=self.private)
        self._trajectory.write(line)
        self._trajectory.flush()

    def write_result(self, result: RunResult | str) -> Path:
        """``result.json``: the result, or its text already serialized (``result_text``)."""
        text = result if isinstance(result, str) else result_text(result)
        path = self.directory / "result.json"
        write_atomic(path, text.encode(), private=self.private)
        return path

    def write_report(self) -> Path | None:
        from .report import render_report

        try:
            return render_report(self.directory, private=self.private)
        except Exception as exc:
            log.warning("report_failed", error=str(exc), directory=str(self.directory))
            return None

    def close(self) -> None:
        self._trajectory.close()


class RunFiles:
    """The run directory of one run, if it has one: each step as it comes, then the result and report.

    The directory is made at the first step, or at the end for a run that ended before its first;
    ``private``: only its owner may read it (a run that holds a secret).
    """

    def __init__(self, directory: str | Path | None, *, private: bool = False) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.private = private
        self._writer: TrajectoryWriter | None = None

    def _open(self) -> TrajectoryWriter | None:
        if self._writer is None and self.directory is not None:
            self._writer = TrajectoryWriter(self.directory, private=self.private)
        return self._writer

    def step(self, step: Step) -> None:
        """Append the step (already redacted) to the trajectory."""
        self.append(*record_step(step))

    def append(self, line: str, screenshot: Screenshot | None) -> None:
        """Append a step's line and save its screenshot, as ``record_step`` made them."""
        writer = self._open()
        if writer is not None:
            writer.append(line, screenshot)

    def finish(self, result: RunResult | None) -> None:
        """Write ``result.json`` (setting ``result.output_dir``) and ``report.html``; close the trajectory."""
        self.end(self.result_text(result))

    def result_text(self, result: RunResult | None) -> str | None:
        """``result`` with its ``output_dir`` set (where the run has a directory), serialized."""
        if result is None:
            return None
        if self.directory is not None:
            result.output_dir = str(self.directory)
        return result_text(result)

    def end(self, result: str | None) -> None:
        """Write ``result.json`` (``result_text``'s) and ``report.html``; close the trajectory."""
        writer = self._open() if result is not None else self._writer
        if writer is None:
            return
        self._writer = None
        try:
            if result is not None:
                writer.write_result(result)
        finally:
            writer.close()  # closed even where result.json could not be written
        if result is not None:
            writer.write_report()


def record_step(step: Step) -> tuple[str, Screenshot | None]:
    """A step's line of ``trajectory.jsonl`` and the screenshot to save with it (its file name set
    on the step first, so the line names it): what ``append`` writes, made where the step is."""
    screenshot = None
    if step.image is not None and step.screenshot is None:
        screenshot = (f"step_{step.index:03d}.{step.image.extension}", step.image)
        step.screenshot = screenshot[0]
    return step.model_dump_json() + "\n", screenshot


def result_text(result: RunResult) -> str:
    """What ``result.json`` holds."""
    return result.model_dump_json(indent=2) + "\n"


def read_trajectory(directory: str | Path) -> list[dict[str, object]]:
    """The step records of a run directory (a truncated last line is skipped)."""
    records: list[dict[str, object]] = []
    path = Path(directory) / "trajectory.jsonl"
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").split("\n"):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
