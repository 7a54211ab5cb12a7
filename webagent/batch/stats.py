"""The live counters of a batch invocation (the progress line and the summary read them)."""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Literal

__all__ = ["AdmissionState", "BatchPhase", "BatchStats"]

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

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started
