"""``FilesSink``: the run directory (``webagent.runs.trajectory``): each step's record and
screenshot as it comes, then ``result.json`` and ``report.html``."""

from __future__ import annotations

from pathlib import Path

from ..records import RunResult, Step
from ..runs.trajectory import RunFiles
from .sink import RunSink

__all__ = ["FilesSink"]


class FilesSink(RunSink):
    """Writes the run directory ``directory`` (``private``: its owner's only, ``webagent.files.disk``)."""

    def __init__(self, directory: Path, *, private: bool = False) -> None:
        self.files = RunFiles(directory, private=private)

    def step(self, step: Step) -> None:
        self.files.step(step)

    async def finish(self, result: RunResult | None) -> None:
        self.files.finish(result)
