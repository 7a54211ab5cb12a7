"""A run's spans, made from its records (``RunTrace``), and whether tracing is on (``enabled``).

Each step's spans are laid out from its timings when it ends: the observation, then the model
calls in the order they were made (each as long as its latency), then the browser action. The
run's span is open from the run's start to its result.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from .._version import __version__
from ..records import ModelCall, RunResult, Step

__all__ = ["RunTrace", "enabled", "run_trace", "shutdown"]

_NS = 1_000_000_000
#: The tracer once decided (False: off; unset: not decided yet).
_tracer: Any = None
_decided = False


def enabled() -> bool:
    """Whether runs are traced (decided once per process, from the environment or an SDK provider
    the application set). Off, nothing of OpenTelemetry is imported."""
    global _tracer, _decided
    if not _decided:
        _decided = True
        from .setup import wanted  # no OpenTelemetry import: it reads the environment

        if wanted(os.environ) or _application_provider():
            from .setup import make_tracer

            _tracer = make_tracer(__version__)
    return _tracer is not None


def _application_provider() -> bool:
    """Whether the application configured an OpenTelemetry SDK provider itself (never imports it)."""
    if "opentelemetry.sdk.trace" not in sys.modules:
        return False
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    return isinstance(trace.get_tracer_provider(), TracerProvider)


def shutdown(timeout_s: float = 5.0) -> None:
    """Push the spans ended so far (the agent is closing)."""
    if _tracer is None:
        return
    from opentelemetry import trace

    from .setup import flush

    flush(trace.get_tracer_provider(), timeout_s)


def run_trace(
    goal: str, url: str, *, redact: Callable[[str], str], price: Callable[[ModelCall], float]
) -> RunTrace | None:
    """The trace of a run starting now (None when tracing is off)."""
    if not enabled():
        return None
    return RunTrace(_tracer, goal, url, redact=redact, price=price)


class RunTrace:
    """The spans of one run."""

    def __init__(
        self, tracer: Any, goal: str, url: str, *, redact: Callable[[str], str], price: Callable[[ModelCall], float]
    ) -> None:
        from opentelemetry import trace

        self._trace = trace
        self._tracer = tracer
        self._redact = redact
        self._price = price
        self.span = tracer.start_span(
            "invoke_agent webagent",
            kind=trace.SpanKind.INTERNAL,
            attributes=self._clean(
                {
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": "webagent",
                    "webagent.goal": goal,
                    "url.full": url,
                }
            ),
        )
        self._context = trace.set_span_in_context(self.span)
        self._cost = 0.0  # the dollars of the model calls traced so far

    def step(self, step: Step) -> None:
        """The spans of a step that has just ended."""
        end = time.time_ns()
        t = step.timings
        start = end - int(max(t.total_s, t.observe_s + t.model_s + t.act_s) * _NS)
        action = step.action.action if step.action is not None else None
        span = self._tracer.start_span(
            f"webagent.step {step.index}",
            context=self._context,
            start_time=start,
            attributes=self._clean(
                {
                    "webagent.step": step.index,
                    "webagent.step.kind": step.kind,
                    "url.full": step.url,
                    "webagent.action": action or "",
                    "webagent.outcome": step.outcome or "",
                    "webagent.replayed": bool(step.replayed),
                    **({"error.type": "step_error", "webagent.error": step.error} if step.error else {}),
                }
            ),
        )
        inner = self._trace.set_span_in_context(span)
        at = start + int(t.observe_s * _NS)
        for call in step.calls:
            at = self._model_call(call, inner, at, end)
        if action is not None and action != "answer":
            act_start = min(at, end)
            self._tool(step, action, inner, act_start, min(end, act_start + int(t.act_s * _NS)))
        if step.error:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, self._redact(step.error)[:200]))
        span.end(end_time=end)

    def _model_call(self, call: ModelCall, parent: Any, start: int, limit: int) -> int:
        usage = call.usage
        end = min(limit, start + int(usage.latency_s * _NS))
        cost = self._price(call)
        self._cost += cost
        span = self._tracer.start_span(
            f"chat {call.model}",
            context=parent,
            kind=self._trace.SpanKind.CLIENT,
            start_time=start,
            attributes=self._clean(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "openai",
                    "gen_ai.request.model": call.model,
                    "gen_ai.usage.input_tokens": usage.prompt_tokens,
                    "gen_ai.usage.output_tokens": usage.completion_tokens,
                    "webagent.role": call.role,
                    "webagent.usage.cached_tokens": usage.cached_tokens,
                    "webagent.latency_s": round(usage.latency_s, 4),
                    "webagent.retries": usage.retries,
                    "webagent.cost_usd": round(cost, 8),
                    **({"error.type": "model_error", "webagent.error": call.error} if call.error else {}),
                }
            ),
        )
        if call.error:
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, self._redact(call.error)[:200]))
        span.end(end_time=end)
        return end

    def _tool(self, step: Step, action: str, parent: Any, start: int, end: int) -> None:
        span = self._tracer.start_span(
            f"execute_tool {action}",
            context=parent,
            start_time=start,
            attributes=self._clean(
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": action,
                    "gen_ai.tool.type": "function",
                    "webagent.element": step.element or "",
                    "webagent.outcome": step.outcome or "",
                }
            ),
        )
        span.end(end_time=max(start, end))

    def end(self, result: RunResult | None) -> None:
        """The run's result (None: it ended without one) and the end of its span."""
        if result is not None:
            self.span.set_attributes(
                self._clean(
                    {
                        "webagent.success": result.success,
                        "webagent.stop_reason": result.stop_reason,
                        "webagent.steps": result.steps,
                        "webagent.message": result.message,
                        "webagent.cost_usd": round(self._cost, 8),
                        "gen_ai.usage.input_tokens": sum(u.prompt_tokens for u in _roles(result)),
                        "gen_ai.usage.output_tokens": sum(u.completion_tokens for u in _roles(result)),
                    }
                )
            )
            if result.stop_reason == "error":
                self.span.set_status(
                    self._trace.Status(self._trace.StatusCode.ERROR, self._redact(result.message)[:200])
                )
        self.span.end()

    def _clean(self, attributes: dict[str, Any]) -> dict[str, Any]:
        """Attributes with every string redacted (again) and cut to a sane length."""
        return {k: self._redact(v)[:2000] if isinstance(v, str) else v for k, v in attributes.items()}


def _roles(result: RunResult) -> list[Any]:
    return [result.usage.policy, result.usage.localizer, result.usage.validator]
