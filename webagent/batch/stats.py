"""The live counters of a batch invocation (the progress line and the summary read them).

They are counted in two places only, whichever runs the tasks (here or on Ray actors): a step as it
ends (``BatchStats.count_step``, from its ``StepFigures``; a Ray actor sends them back with the
task's line) and a task as its line is written (``BatchStats.count_line``).
"""

from __future__ import annotations

import collections
import re
import time
from dataclasses import dataclass
from typing import Literal

from ..browser.providers import HostFigures, session_host
from ..records import Step
from ..stream import SETUP_FAILED
from .results import TaskResult

__all__ = ["AdmissionState", "BatchPhase", "BatchStats", "StepFigures", "infra_cause"]

#: Where a batch stands before its first progress line: ``launch`` its browser is being launched,
#: ``ray`` Ray and its actors are being started (each launches its browser), ``run`` its runs started.
BatchPhase = Literal["launch", "ray", "run"]


@dataclass(frozen=True)
class AdmissionState:
    """What the admission control lets run now: ``limit`` sessions (``ceiling``: ``--concurrency``),
    ``held`` tasks waiting for a place, and why the limit is where it is; and so far: the lowest and
    highest limit, the most sessions at once, the decreases, the time tasks were held back."""

    limit: int
    ceiling: int
    held: int = 0
    reason: str = ""
    lowest: int = 0
    highest: int = 0
    peak_running: int = 0
    decreases: int = 0
    held_back_s: float = 0.0

    @property
    def held_back(self) -> bool:
        """Tasks wait while there is room below the ceiling: the browsers do not keep up."""
        return self.held > 0 and self.limit < self.ceiling


@dataclass(frozen=True, slots=True)
class StepFigures:
    """What the counters take from one step: its model tokens and times, and the browser host its
    session is on (``""`` without a fleet of hosts; read in the run's own task)."""

    tokens: int
    total_s: float
    model_s: float
    browser_s: float
    host: str = ""

    @classmethod
    def of(cls, step: Step) -> StepFigures:
        t = step.timings
        tokens = sum(c.usage.prompt_tokens + c.usage.completion_tokens for c in step.calls)
        return cls(tokens, t.total_s, t.model_s, t.observe_s + t.act_s, session_host.get())


class BatchStats:
    """Live counters of this invocation (progress display and summary)."""

    def __init__(self, total: int, already_done: int) -> None:
        self.phase: BatchPhase = "launch"
        self.total = total
        self.done = already_done
        self.resumed = already_done
        #: Of the resumed tasks: lines kept that ended with stop reason "error" (the task's own failure).
        self.resumed_failed = 0
        #: Lines that ended with the infrastructure's error, run again now (not counted in ``resumed``)...
        self.resumed_infra = 0
        #: ... or kept (``retry_infra`` off: counted in ``resumed``).
        self.resumed_infra_kept = 0
        self.succeeded = 0
        self.finished_now = 0
        self.errors = 0
        self.retried = 0
        self.stalled = 0
        #: Runs re-run because the infrastructure failed under them (not a crash, not a stall), by cause.
        self.infra_reruns = 0
        self.infra_causes: collections.Counter[str] = collections.Counter()
        #: Runs re-run because the browser failed before their first step (a crash or a deadline while
        #: their session was set up), by cause.
        self.setup_crashes = 0
        self.setup_causes: collections.Counter[str] = collections.Counter()
        self.steps = 0
        self.tokens = 0
        self.in_flight = 0
        self.admission: AdmissionState | None = None
        #: Bounded browser commands answered, given more time on a saturated machine, given up.
        self.commands = {"answered": 0, "extended": 0, "expired": 0}
        self.started = time.monotonic()
        self.step_total_s: list[float] = []
        self.step_model_s: list[float] = []
        self.step_browser_s: list[float] = []
        #: Step times by browser host (a fleet's), and the hosts' own counts (its pool's, when read).
        self.host_step_s: dict[str, list[float]] = {}
        self.host_counts: dict[str, HostFigures] = {}
        #: Under ``--ray``: where the actors' browsers are (one per node, or one per actor and why).
        self.ray_browsers = ""

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def count_step(self, step: StepFigures) -> None:
        """A step ended (of a run here, or of a run on a Ray actor)."""
        self.steps += 1
        self.tokens += step.tokens
        self.step_total_s.append(step.total_s)
        self.step_model_s.append(step.model_s)
        self.step_browser_s.append(step.browser_s)
        if step.host:
            self.host_step_s.setdefault(step.host, []).append(step.total_s)

    def count_line(self, result: TaskResult) -> None:
        """A task's line was written: it finished, and what its attempts needed on the way."""
        self.done += 1
        self.finished_now += 1
        self.succeeded += result.success
        self.errors += result.stop_reason == "error"
        self.retried += result.retried
        for attempt in result.attempt_records:
            self.stalled += attempt.stalled
            for rerun in attempt.reruns:
                self.stalled += rerun.reason == "stalled"
                if rerun.reason == "infrastructure":
                    self.infra_reruns += 1
                    self.infra_causes[infra_cause(rerun.message)] += 1
                elif rerun.reason == "setup_crash":
                    self.setup_crashes += 1
                    self.setup_causes[infra_cause(rerun.message.removeprefix(SETUP_FAILED))] += 1


_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(\.\d+)?")


def infra_cause(message: str) -> str:
    """What an infrastructure error's message says, without its URLs and figures, for counting
    re-runs by cause ("the page gives no screenshot (none within N s, twice) at URL")."""
    first = message.splitlines()[0] if message else "unknown"
    return _NUMBER.sub("N", _URL.sub("URL", first))[:160]
