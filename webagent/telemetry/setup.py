"""Whether tracing is on, and the tracer: set up from the standard ``OTEL_*`` environment once.

Imported only when tracing is on (``webagent.telemetry.runs.enabled`` reads the environment
without it); the OpenTelemetry SDK and the OTLP exporter come from the ``otel`` extra.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping
from typing import Any

import structlog

__all__ = ["make_tracer", "wanted"]

log = structlog.get_logger("webagent.telemetry")

TRUE = ("true", "1", "yes", "on")


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces (an OTLP endpoint or a traces exporter, not disabled)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in TRUE:
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return bool(exporter or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def make_tracer(version: str) -> Any:
    """webagent's tracer: from the application's SDK provider when it set one, else from a provider
    set up here after the environment (None when the ``otel`` extra is missing)."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
    except ModuleNotFoundError:
        log.warning("otel_extra_missing", hint="pip install 'webagent[otel]' for OpenTelemetry traces")
        return None
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the application set none: one from the environment
        env = os.environ
        exporters: list[SpanExporter] = []
        names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",") if n.strip()]
        for name in names or ["otlp"]:
            if name == "console":
                exporters.append(ConsoleSpanExporter())
            elif name == "otlp":
                exporter = _otlp_exporter(env)
                if exporter is not None:
                    exporters.append(exporter)
            else:
                log.warning("otel_exporter_unknown", exporter=name, known="otlp, console")
        if not exporters:
            return None
        service = env.get("OTEL_SERVICE_NAME", "webagent")
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        for exporter in exporters:
            provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        atexit.register(provider.shutdown)  # the last spans leave before the process does
    return provider.get_tracer("webagent", version)


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"))
    if protocol.strip().lower() != "http/protobuf":
        log.warning("otel_protocol_unsupported", protocol=protocol, supported="http/protobuf")
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout: from the OTEL_EXPORTER_OTLP_* environment


def flush(tracer_provider: Any, timeout_s: float) -> None:
    """Push the spans ended so far (when the agent closes)."""
    force = getattr(tracer_provider, "force_flush", None)
    if force is not None:
        force(int(timeout_s * 1000))
