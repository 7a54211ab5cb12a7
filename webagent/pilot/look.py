"""One look at a page for a check or an extraction, and the one-step run directory it leaves.

A check (or an extraction) is recorded like a run of one step, through a run's recorder
(``webagent.record``), so that it has the same outputs as any run: its spans when tracing is on,
and with a run directory ``step_001.jpg`` (the screenshot the model saw), ``trajectory.jsonl``,
``result.json`` (``success``: the statement held, or the data validated) and ``report.html``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..images import ResizeRule, Screenshot, frame_for
from ..loop import PageDriver
from ..record import Recorder
from ..records import Fingerprint, ModelCall, RunResult, Step, Usage, Verdict
from ..replay import fingerprint

__all__ = ["Look", "look_at", "record_look"]


@dataclass(frozen=True, slots=True)
class Look:
    """The page as a check or an extraction sees it."""

    url: str
    title: str
    image: Screenshot
    seen: Fingerprint | None
    """The replay cache's fingerprint of the page (None when there is no cache)."""
    started: float
    started_at: str


async def look_at(driver: PageDriver, rule: ResizeRule | None, *, fingerprinted: bool) -> Look:
    """Screenshot (the size a run's screenshots have under ``rule``), URL and title of the page;
    its fingerprint too when ``fingerprinted``. Every read is bounded by the driver."""
    started, started_at = time.monotonic(), time.strftime("%Y-%m-%dT%H:%M:%S%z")
    image = await driver.screenshot(frame_for(*driver.viewport, rule))
    title = await driver.title()
    url = driver.url
    seen = None
    if fingerprinted:
        seen = fingerprint(url, title, await driver.page_text(), image, start_url=url)
    return Look(url=url, title=title, image=image, seen=seen, started=started, started_at=started_at)


async def record_look(
    recorder: Recorder,
    look: Look,
    *,
    goal: str,
    verdict: Verdict,
    outcome: str,
    calls: list[ModelCall],
    usage: Usage,
    answer: str | None = None,
    replayed: bool = False,
    error: str | None = None,
) -> None:
    """Record a check or an extraction as a run of one step (``recorder``: its run directory, spans)."""
    step = Step(
        index=1,
        kind="final",
        url=look.url,
        title=look.title,
        image=look.image,
        image_size=(look.image.frame.image_width, look.image.frame.image_height),
        thought=goal,
        outcome=outcome,
        error=error,
        verdict=verdict,
        calls=calls,
        replayed=replayed if look.seen is not None else None,
        fingerprint=look.seen,
    )
    step.timings.validate_s = step.timings.total_s = sum(c.usage.latency_s for c in calls)
    result = RunResult(
        success=verdict.success,
        answer=answer,
        stop_reason="error" if error else "answered",
        message=error or outcome,
        url=look.url,
        final_url=look.url,
        goal=goal,
        steps=1,
        attempts=1,
        feedback=[verdict.feedback],
        usage=usage,
        duration_s=round(time.monotonic() - look.started, 3),
        model_s=round(step.timings.validate_s, 3),
        started_at=look.started_at,
        replayed_steps=int(replayed),
        calls_saved=int(replayed),
    )
    recorder.step(step)
    await recorder.finish(result)
    await recorder.closed()
