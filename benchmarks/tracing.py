"""Tracing overhead: ``benchmarks/throughput.py`` with tracing off, then on (OTLP/HTTP to a receiver).

Both runs are the same batch at N sessions against the offline model server; the second has
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at an OTLP receiver started here (OpenTelemetry's own
protobuf decoding; its CPU is not counted, as a collector runs elsewhere). It prints each run's
table and the spans received, then what the spans alone cost: the Python CPU of making a step's
spans (``RunTrace.step``) and of exporting them, measured in this process over ``--span-steps`` steps
(``--spans-only``: that measurement alone, in a second).

    python benchmarks/tracing.py --sessions 100 --steps 10 --latency 1.0
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from webagent.testing.otlp import OTLPReceiver

THROUGHPUT = Path(__file__).with_name("throughput.py")


def run(args: argparse.Namespace, env: dict[str, str]) -> str:
    command = [
        sys.executable, str(THROUGHPUT), "--sessions", args.sessions, "--steps", str(args.steps),
        "--latency", str(args.latency), "--token-steps", "0", "--repeat", str(args.repeat),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n\n")[0])
    parser.add_argument("--sessions", default="10", help="comma-separated N values")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--span-steps", type=int, default=600, help="steps traced for the spans' own cost")
    parser.add_argument("--spans-only", action="store_true", help="measure the spans' own cost only")
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if args.spans_only:
        with OTLPReceiver() as receiver:
            print(span_cost(receiver, args.span_steps))
        return
    print("== tracing off ==")
    print(run(args, base))
    with OTLPReceiver() as receiver:
        print("== tracing on (OTLP/HTTP) ==")
        print(run(args, base | {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "1000"}))
        kinds: dict[str, int] = {}
        for span in receiver.spans:
            kind = span.name.split(" ")[0]
            kinds[kind] = kinds.get(kind, 0) + 1
        print(f"spans received: {len(receiver.spans)} {kinds} in {len(receiver.bodies)} exports")
        print(span_cost(receiver, args.span_steps))


def span_cost(receiver: OTLPReceiver, steps: int) -> str:
    """The Python CPU of tracing ``steps`` steps (a policy and a localizer call each, 3 spans) in this
    process, exported over OTLP/HTTP to ``receiver`` (a thread of this process: its decoding is in
    the export's figure, which so overstates the exporter's own cost)."""
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[name]  # the shell's settings are not this measurement's
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
    # One export, after the spans are made: none while they are (a batch every 512 spans otherwise).
    os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = os.environ["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"] = str(3 * steps + 16)
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "600000"
    from webagent.records import ModelCall, RoleUsage, Step, Timings
    from webagent.telemetry import runs

    trace = runs.run_trace("find the price", "http://127.0.0.1/", redact=lambda s: s, price=lambda _: 0.0)
    if trace is None:
        return "spans: tracing did not start (the otel extra missing?)"
    calls = [
        ModelCall(role=role, model="holo", usage=RoleUsage(prompt_tokens=5000, completion_tokens=50, latency_s=1.0))
        for role in ("policy", "localizer")
    ]
    timings = Timings(observe_s=0.1, policy_s=1.0, localize_s=1.0, act_s=0.2, total_s=2.4)
    records = [Step(index=i, url="http://127.0.0.1/p", calls=calls, timings=timings) for i in range(steps)]
    received = len(receiver.spans)
    made = time.process_time()
    for record in records:
        trace.step(record)
    exported = time.process_time()
    runs.shutdown()
    done = time.process_time()
    return (
        f"spans alone: {(exported - made) / steps * 1000:.3f} ms of Python CPU per step to make them (3 spans), "
        f"{(done - exported) / steps * 1000:.3f} ms to export and receive them; {len(receiver.spans) - received} received"
    )


if __name__ == "__main__":
    main()
