"""``FilesSink``: the run directory (``webagent.runs.trajectory``): each step's record and
screenshot as it comes, then ``result.json`` and ``report.html``; written by the process's writer
thread (``writer.WRITER``), off the event loop, and awaited at the run's end. A run set aside for
a re-run in the same directory is fenced (``fence``): nothing of its is written there after."""

from __future__ import annotations

from pathlib import Path

from ..records import RunResult, Step
from ..runs.trajectory import RunFiles, record_step
from .sink import RunSink
from .writer import WRITER, RecordWriter, RunWrites

__all__ = ["FilesSink"]


class FilesSink(RunSink):
    """Writes the run directory ``directory`` (``private``: its owner's only, ``webagent.files.disk``)
    through ``writer`` (the process's). A record is serialized here, when it comes (the bytes the
    loop would have written); the thread writes it. A write that failed is raised at the next step
    and at the end."""

    def __init__(self, directory: Path, *, private: bool = False, writer: RecordWriter = WRITER) -> None:
        self.files = RunFiles(directory, private=private)
        self.writes = RunWrites(writer, str(directory))

    def step(self, step: Step) -> None:
        self.writes.raise_error()
        line, screenshot = record_step(step)  # the step names its screenshot file before it goes on
        self.writes.submit(lambda: self.files.append(line, screenshot))

    async def finish(self, result: RunResult | None) -> None:
        """The result written and the trajectory closed once the run's steps are: all awaited."""
        text = self.files.result_text(result)  # result.output_dir set now, as the next sinks see it
        self.writes.submit(lambda: self.files.end(text), always=True)
        await self.writes.flushed()

    async def fence(self, timeout_s: float) -> bool:
        """The run's writes so far done within ``timeout_s``, the rest dropped (``RunWrites.fence``);
        its trajectory file then closed here, as no job of the run's will touch it again."""
        fenced = await self.writes.fence(timeout_s)
        if fenced:
            self.files.end(None)  # closes the file if it is open; writes nothing
        return fenced
