"""``run_recorder``: the recorder of one run, its sinks chosen from its ``RunSpec`` -- the one place
that says which outputs a run has, whichever driver runs it (``RunStream``, ``WebEnv``, a pilot's
look).

In order: the saved state (first: a state not saved fails the run the others then see), the replay
cache's update, the Playwright trace, the HAR, the spans, and the run directory last (its
``result.json`` holds what the others added: the trace's path)."""

from __future__ import annotations

from collections.abc import Callable

from ..replay import StepReplay
from ..runtime import RunSpec, Runtime
from ..telemetry import runs as telemetry
from .files import FilesSink
from .har import HarSink
from .replay import ReplaySink
from .sink import Recorder, RunSink
from .spans import SpanSink
from .state import StateSink
from .trace import TraceSink

__all__ = ["run_recorder"]


def run_recorder(
    runtime: Runtime,
    spec: RunSpec,
    *,
    replay: StepReplay | None = None,
    on_progress: Callable[[], None] = lambda: None,
) -> Recorder:
    """The recorder of a run of ``spec`` on ``runtime`` (its spans begin now). ``replay``: the
    recording the run was given from ``spec.cache``, updated when the run succeeds."""
    secrets = runtime.sessions.secrets(spec.browser)
    # Its owner's only (0700 / 0600: webagent.files.disk) when the run types secrets, holds a signed-in
    # state or a password, or saves one.
    private = runtime.sessions.private(spec.browser) or spec.save_state is not None
    own_context = spec.page is None and spec.context is None
    directory = spec.output_dir
    sinks: list[RunSink] = []
    if spec.save_state is not None:
        sinks.append(StateSink(spec.save_state))
    if spec.cache is not None and replay is not None:
        sinks.append(
            ReplaySink(
                spec.cache, spec.cache_key, replay, url=spec.url, goal=spec.goal, expect=spec.expect, secrets=secrets
            )
        )
    # No trace when secrets are set: its DOM snapshots would hold the typed values (and its network
    # log a signed-in state's cookies), and a trace cannot be redacted. A suite's variables alone keep it.
    if directory is not None and spec.trace != "off" and own_context and not secrets.credentials:
        sinks.append(TraceSink(directory, spec.trace, private=private))
    har = spec.har if spec.har is not None else runtime.config.run.har
    if directory is not None and har and own_context:
        sinks.append(HarSink(directory, secrets, private=private))
    spans = telemetry.run_trace(spec.goal, spec.url, redact=secrets.redact, price=runtime.price)
    if spans is not None:
        sinks.append(SpanSink(spans))
    if directory is not None:
        sinks.append(FilesSink(directory, private=private))
    return Recorder(secrets, sinks, private=private, on_progress=on_progress)
