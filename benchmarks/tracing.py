"""Tracing overhead: ``benchmarks/throughput.py`` with tracing off, then on (OTLP/HTTP to a receiver).

Both runs are the same batch at N sessions against the offline model server; the second has
``OTEL_EXPORTER_OTLP_ENDPOINT`` pointing at an OTLP receiver started here (OpenTelemetry's own
protobuf decoding; its CPU is not counted, as a collector runs elsewhere). It prints each run's
table and the spans received.

    python benchmarks/tracing.py --sessions 100 --steps 10 --latency 1.0
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
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
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
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


if __name__ == "__main__":
    main()
