"""An OTLP/HTTP trace receiver on 127.0.0.1 (``POST /v1/traces``, protobuf), for the tracing tests and
benchmarks: it decodes what an OpenTelemetry exporter sends with OpenTelemetry's own protobuf
definitions (``opentelemetry-proto``, installed with the ``otel`` extra) and keeps the spans and
the raw request bodies."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web

from .threaded import LoopThread, serve_app

__all__ = ["OTLPReceiver", "ReceivedSpan"]


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int
    service: str


@dataclass
class OTLPReceiver:
    port: int = 0
    spans: list[ReceivedSpan] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    _thread: LoopThread = field(default_factory=lambda: LoopThread("otlp-receiver"))
    _runner: web.AppRunner | None = None

    @property
    def endpoint(self) -> str:
        """What ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set to (the exporter adds ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.port}"

    def named(self, prefix: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name.startswith(prefix)]

    def __enter__(self) -> Self:
        self._thread.start(self._start)
        return self

    def __exit__(self, *exc: object) -> None:
        runner = self._runner
        self._thread.stop(runner.cleanup if runner is not None else None)

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes([web.post("/v1/traces", self._traces)])
        self._runner, self.port = await serve_app(app, "127.0.0.1", self.port)

    async def _traces(self, request: web.Request) -> web.Response:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.bodies.append(body)
        message = ExportTraceServiceRequest()
        message.ParseFromString(body)
        for resource_spans in message.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            kind=span.kind,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status_code=span.status.code,
                            service=str(resource.get("service.name", "")),
                        )
                    )
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind is not None else None
