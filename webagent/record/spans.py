"""``SpanSink``: the run's OpenTelemetry spans (``webagent.telemetry``), made from its records:
a run span opened when the recorder is made, a step span (with its model calls and browser
action) as each step ends, the result's attributes when it ends. Only made when tracing is on."""

from __future__ import annotations

from ..records import RunResult, Step
from ..telemetry import RunTrace
from .sink import RunSink

__all__ = ["SpanSink"]


class SpanSink(RunSink):
    """The spans of one run (``RunTrace``)."""

    def __init__(self, trace: RunTrace) -> None:
        self.trace = trace

    def step(self, step: Step) -> None:
        self.trace.step(step)

    async def finish(self, result: RunResult | None) -> None:
        self.trace.end(result)
