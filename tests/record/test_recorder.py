"""``Recorder``: each record redacted once, then handed to every sink, the same object to each; the
result finished once, the sinks in order (the first may amend what the next see); a new output is
a sink of its own, added without an edit of any driver."""

from __future__ import annotations

from webagent.guard.secrets import Secrets
from webagent.record import Recorder, RunSink
from webagent.records import RunResult, Step

PASSWORD = "hunter2-very-secret"


class Collect(RunSink):
    def __init__(self, amend: str | None = None) -> None:
        self.steps: list[Step] = []
        self.results: list[RunResult | None] = []
        self.closes = 0
        self.amend = amend

    def step(self, step: Step) -> None:
        self.steps.append(step)

    async def finish(self, result: RunResult | None) -> None:
        self.results.append(result)
        if result is not None and self.amend is not None:
            result.message = self.amend

    async def closed(self) -> None:
        self.closes += 1


async def test_records_are_redacted_once_and_fanned_out_in_order() -> None:
    first, second = Collect(amend="amended by the first sink"), Collect()
    progress: list[int] = []
    recorder = Recorder(Secrets({"PASSWORD": PASSWORD}), [first, second], on_progress=lambda: progress.append(1))
    step = Step(index=1, url="http://127.0.0.1/", thought=f"I type {PASSWORD}")
    recorded = recorder.step(step)
    assert recorded.thought == "I type {{PASSWORD}}" and step.thought == f"I type {PASSWORD}"  # the caller's kept
    assert first.steps == [recorded] and second.steps[0] is first.steps[0]  # one redaction, the same record
    result = RunResult(success=True, stop_reason="answered", message=f"signed in with {PASSWORD}", url="", goal="g")
    finished = await recorder.finish(result)
    assert finished is not None and finished.message == "amended by the first sink"
    assert second.results[0] is finished and PASSWORD not in finished.model_dump_json()
    assert await recorder.finish(None) is None and len(first.results) == len(second.results) == 1  # once
    await recorder.closed()
    assert first.closes == second.closes == 1 and len(progress) == 4
    assert recorder.sink(Collect) is first and recorder.error is None
