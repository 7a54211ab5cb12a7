"""OpenTelemetry traces of runs, after the GenAI semantic conventions; off unless ``OTEL_*`` says on.

Each run is an ``invoke_agent webagent`` span; its steps are ``webagent.step`` spans; within a step
each model call is a ``chat <model>`` span (``gen_ai.request.model``, ``gen_ai.usage.input_tokens``
and ``output_tokens``, ``webagent.role``, ``webagent.cost_usd``, its latency the span's length)
and the browser action an ``execute_tool <action>`` span. The spans are made from the run's own
records as each step ends (``RunStream``), after secrets are redacted from them -- nothing in the
loop or the browser is instrumented, and every string attribute is redacted once more.

On: with the standard environment -- ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (OTLP over HTTP/protobuf), or ``OTEL_TRACES_EXPORTER``
(``otlp``, ``console``) -- unless ``OTEL_SDK_DISABLED=true``; or when the application has set an
SDK tracer provider itself (webagent then uses it and sets up nothing). Needs the ``otel`` extra
(``pip install 'webagent[otel]'``). Off, a run costs one cached check: nothing is imported.
"""

from __future__ import annotations

from .runs import RunTrace, enabled, run_trace, shutdown

__all__ = ["RunTrace", "enabled", "run_trace", "shutdown"]
