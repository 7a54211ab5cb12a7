"""The event loop's time a step spends recording its run directory: written in place on the loop
(``RunFiles.step``, as before issue 48) against handed to the writer thread (``FilesSink.step``,
``webagent/record/writer.py``), side by side in one run, in alternating rounds.

Each round records ``--runs`` runs at once of ``--steps`` steps each, every step with a screenshot
of ``--image-kib`` KiB (a JPEG at the model's size is 60-150 KiB) and a record the size of a real
step's (``--record-kib``, its replies and timings), the runs' steps interleaved on one loop. It
prints, per way, the loop's time a step in the recording call (mean and 99th percentile) and the
wall time until every run's end was awaited (the writes done).

    python benchmarks/record_writes.py --runs 100 --steps 10 --rounds 4
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import tempfile
import time
from pathlib import Path

from webagent.images import Frame, Screenshot
from webagent.record import FilesSink
from webagent.records import RunResult, Step
from webagent.runs.trajectory import RunFiles

__all__ = ["main", "record_round"]


def make_step(index: int, image_kib: int, record_kib: int) -> Step:
    image = Screenshot(
        base64.b64encode(os.urandom(image_kib * 1024)).decode(), "image/jpeg", Frame(1280, 800, 1260, 784)
    )
    return Step(index=index, url="http://127.0.0.1/", thought="x" * (record_kib * 1024), image=image)


async def record_round(way: str, root: Path, args: argparse.Namespace) -> tuple[list[float], float]:
    """One round: the loop's seconds in each recording call, and the wall time to the last end."""
    spent: list[float] = []
    result = RunResult(success=True, stop_reason="answered", message="done", url="", goal="g")

    async def run(i: int) -> None:
        directory = root / way / f"run-{i}"
        files, sink = (RunFiles(directory), None) if way == "in place" else (None, FilesSink(directory))
        for index in range(1, args.steps + 1):
            step = make_step(index, args.image_kib, args.record_kib)
            started = time.perf_counter()
            if sink is not None:
                sink.step(step)
            else:
                assert files is not None
                files.step(step)
            spent.append(time.perf_counter() - started)
            await asyncio.sleep(0)  # the other runs' steps in between, as on a batch's loop
        if sink is not None:
            await sink.finish(result.model_copy())
        else:
            assert files is not None
            files.finish(result.model_copy())

    started = time.perf_counter()
    await asyncio.gather(*(run(i) for i in range(args.runs)))
    return spent, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100, help="runs recorded at once")
    parser.add_argument("--steps", type=int, default=10, help="steps a run")
    parser.add_argument("--image-kib", type=int, default=100, help="screenshot size, KiB")
    parser.add_argument("--record-kib", type=int, default=8, help="a step record's size, KiB")
    parser.add_argument("--rounds", type=int, default=4, help="rounds, alternating the two ways")
    args = parser.parse_args()
    for r in range(args.rounds):
        for way in ("in place", "writer thread") if r % 2 == 0 else ("writer thread", "in place"):
            with tempfile.TemporaryDirectory(prefix="webagent-record-") as tmp:
                spent, wall = asyncio.run(record_round(way, Path(tmp), args))
            p99 = statistics.quantiles(spent, n=100)[98] * 1000
            print(
                f"round {r + 1} {way:13}: loop time a step mean {statistics.mean(spent) * 1000:.2f} ms, "
                f"p99 {p99:.2f} ms; wall to the last end {wall:.2f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
