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
from ..records import RunResult, Step

__all__ = ["RunFiles", "TrajectoryWriter", "read_trajectory"]

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
        if step.image is not None and step.screenshot is None:
            name = f"step_{step.index:03d}.{step.image.extension}"
            write_atomic(self.directory / name, step.image.data(), private=self.private)
            step.screenshot = name
        self._trajectory.write(step.model_dump_json() + "\n")
        self._trajectory.flush()

    def write_result(self, result: RunResult) -> Path:
        path = self.directory / "result.json"
        write_atomic(path, (result.model_dump_json(indent=2) + "\n").encode(), private=self.private)
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
        writer = self._open()
        if writer is not None:
            writer.write_step(step)

    def finish(self, result: RunResult | None) -> None:
        """Write ``result.json`` (setting ``result.output_dir``) and ``report.html``; close the trajectory."""
        writer = self._open() if result is not None else self._writer
        if writer is None:
            return
        if result is not None:
            result.output_dir = str(writer.directory)
            writer.write_result(result)
        writer.close()
        if result is not None:
            writer.write_report()
        self._writer = None


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
