"""What a run leaves behind: its trajectory file, its HTML report and the live step display."""

from __future__ import annotations

from .display import StepPrinter
from .report import load_run, render_report, render_report_html
from .trajectory import TrajectoryWriter, read_trajectory

__all__ = [
    "StepPrinter",
    "TrajectoryWriter",
    "load_run",
    "read_trajectory",
    "render_report",
    "render_report_html",
]
