"""One recorder for every run: ``Recorder`` redacts a run's records once and fans them out to its
``RunSink``s, one per output -- the run directory (``FilesSink``), OpenTelemetry spans
(``SpanSink``), the replay cache's update (``ReplaySink``), the saved signed-in state
(``StateSink``), the Playwright trace (``TraceSink``) and the network HAR (``HarSink``).
``run_recorder`` picks a run's sinks from its ``RunSpec``; every driver records through it: the
model-driven run (``RunStream``), a caller-driven RL episode (``WebEnv``), a pilot's check or
extraction. A new output is a new sink, not an edit of the loop."""

from __future__ import annotations

from .build import run_recorder
from .files import FilesSink
from .har import HAR_NAME, REDACTED, HarSink, redact_har
from .replay import ReplaySink
from .sink import Recorder, RunSink
from .spans import SpanSink
from .state import StateSink
from .trace import TRACE_TIMEOUT_S, TraceSink

__all__ = [
    "HAR_NAME",
    "REDACTED",
    "TRACE_TIMEOUT_S",
    "FilesSink",
    "HarSink",
    "Recorder",
    "ReplaySink",
    "RunSink",
    "SpanSink",
    "StateSink",
    "TraceSink",
    "redact_har",
    "run_recorder",
]
