"""What a step costs, by process and by phase: the agent against a bare Playwright loop on a navigating site.

The workload is the soak site's (``benchmarks/soaksite``) without its faults: each task is ``--steps``
steps, S-1 actions drawn per task from link clicks that load the next page (same origin), a click on
the long list (``--list-items`` items) followed by two wheel scrolls, a ``target=_blank`` link (a new
tab, followed) and the slow page (answering after ``--slow-ms``), then an answer the validator
accepts. Both sides come from ``benchmarks/soak.py``, side by side in one run, at each N:

1. the floor (``soak.floor``): a plain Playwright loop over N contexts of one Chromium doing the same
   browser work per step: a JPEG screenshot at the agent's size and quality (the profile's frame,
   ``jpeg_quality``), the same click or wheel, the agent's settle (the load of a navigation or new
   tab, capped at ``settle_timeout_s``, and one ``Runtime.evaluate`` that reads the scroll offsets,
   after a frame when scrolling), and a sleep of ``--latency`` per model call the agent makes then;
2. the agent (``soak.agent``): ``BatchRunner`` against the offline model server (its own process, not
   counted) answering after ``--latency`` per call.

Printed per N: steps/s and CPU per step of both and their ratios, and a table of CPU milliseconds per
step (middle 80% of steps) by process kind (this Python process, the Playwright driver, Chromium's
browser, GPU, renderer and utility processes) and, with ``--profile``, the Python process's by phase.
The phases come from py-spy (``pip install py-spy``), sampling this process from outside
(``--nonblocking``: the process is not paused; its own CPU is printed, not counted): each sample is
given to the innermost frame a rule of ``PHASES`` knows (request encoding and reply parsing, HTTP,
screenshot, settle, navigation tracking and the guard, the DevTools connection, the Playwright client,
trajectory and report writing, the watchdog and deadlines, ...), and the Python process's CPU per step
is shared out by those counts (over the whole phase, launch and teardown included).

The messages table counts per step (the window is counted in screenshots sent, then divided by the
side's screenshots per step, its first row). With ``--chromium-trace S`` each side's browser is also
traced for S seconds a third of the way in (counted in screenshots sent: ``benchmarks/chrometrace.py``): thread time per step by
Chromium task on the browser's UI and IO threads, the display compositor, MemoryInfra and the
renderers' main threads.

    python benchmarks/stepcpu.py --sessions 200 --steps 8 --chromium-trace 10
    python benchmarks/stepcpu.py --sessions 10 --profile
    python benchmarks/stepcpu.py --sessions 10,50,100 --steps 10 --latency 1.0 --repeat 3
    python benchmarks/stepcpu.py --sessions 300 --steps 6 --hog 4 --chromium-trace 10   # beside a busy machine
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import chrometrace  # noqa: E402
import soak  # noqa: E402
from stepcpu_probes import PHASES, SHOTS, Messages, Profiler  # noqa: E402
from throughput import STARTED, THREAD  # noqa: E402

from webagent.browser.launcher import find_chromium  # noqa: E402
from webagent.cli import configure_logging  # noqa: E402
from webagent.config import BrowserConfig  # noqa: E402

#: The blocks of a task's plan (soak's actions): a page load, a list and two scrolls, a new tab, a slow page.
BLOCKS: dict[str, list[soak.Act]] = {
    "same": [("click", "same-origin page link")],
    "list": [("click", "long list link"), ("scroll", "down"), ("scroll", "down")],
    "newtab": [("click", "new tab link")],
    "slow": [("click", "slow page link")],
}
#: The order the blocks are drawn from (clicks that load the next page weigh twice).
DRAW = ["same", "same", "list", "newtab", "slow"]


def plans_for(n: int, actions: int, seed: int) -> list[list[soak.Act]]:
    plans = []
    for i in range(n):
        rng = random.Random(seed * 1_000_003 + i)
        acts: list[soak.Act] = []
        while len(acts) < actions:
            acts += BLOCKS[rng.choice(DRAW)]
        plans.append(acts[:actions])
    return plans


def soak_args(args: argparse.Namespace) -> argparse.Namespace:
    """What ``soak.agent`` reads of its command line."""
    return argparse.Namespace(
        command_timeout=0.0,
        kill=None,
        guard=args.guard,
        browsers=1,
        no_admission=False,
        freeze=None,
        executable=args.executable,
        workers="1",
        seed=args.seed,
    )


async def side(
    name: str, args: argparse.Namespace, n: int, origin: str, workdir: Path, exclude: set[int], children: list[Any]
) -> dict[str, Any]:
    plans = plans_for(n, args.steps - 1, args.seed)
    urls = [f"{origin}/p?t=s{i:04d}&n=0&ms={args.slow_ms}&items={args.list_items}" for i in range(n)]
    limits = (soak.default_deadline(n, args.steps, args.latency), 120.0)
    workdir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once per side)
    prof = Profiler(args.profile_rate if args.profile else 0, workdir / f"{name}.pyspy")
    window: dict[str, collections.Counter[str]] = {}

    async def watch(messages: Messages) -> None:
        """py-spy and the message counts over the middle 80% of the screenshots (the steps)."""
        expected = n * args.steps
        while messages.counts[SHOTS] < 0.1 * expected:  # noqa: ASYNC110 (a counter, polled: no event to wait on)
            await asyncio.sleep(0.2)
        window["start"] = messages.counts.copy()
        prof.start()
        while messages.counts[SHOTS] < 0.9 * expected:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        prof.stop()
        window["stop"] = messages.counts.copy()

    with Messages() as messages:
        ready = lambda: messages.counts[SHOTS] >= n * args.steps / 3  # noqa: E731
        async with traced(args.chromium_trace, ready) as tracer:
            watcher = asyncio.create_task(watch(messages))
            try:
                if name == "floor":
                    result = await soak.floor(plans, urls, args.latency, exclude, limits, workdir, args.executable)
                else:
                    result = await soak.agent(
                        plans, urls, args.latency, workdir, exclude, limits, children, soak_args(args)
                    )
            finally:
                watcher.cancel()
                prof.stop()
    counts = window.get("stop", messages.counts) - window.get("start", collections.Counter())
    # The window is counted in screenshots sent; a side that sends more than one a step (a capture
    # taken ahead and dropped, one sent again after a commit) has fewer steps in it: its counts are
    # per step at the phase's own captures per step, not per capture.
    per_step = messages.counts[SHOTS] / max(result["steps"], 1)
    steps = max(counts.pop(SHOTS, 0) / max(per_step, 1e-9), 1.0)
    result["chromium_trace"] = chrometrace.per_step(tracer.traces, result["steps_per_s"])
    result["captures_per_step"] = per_step
    result["phases"] = prof.phases()
    result["profiler_ms"] = prof.cpu_s / steps * 1000
    result["messages"] = {k: v / steps for k, v in counts.items()}
    return result


@contextlib.asynccontextmanager
async def traced(seconds: float, ready: Callable[[], bool]) -> AsyncIterator[chrometrace.BrowserTracer]:
    """A tracer given every browser the phase launches (the floor's and the agent's pool's)."""
    from webagent.browser import launcher

    tracer = chrometrace.BrowserTracer(seconds, ready)
    saved = (soak.launch_browser, launcher.launch_browser)

    def watched(launch: Callable[..., Any]) -> Callable[..., Any]:
        async def launch_and_watch(*args: Any, **kwargs: Any) -> Any:
            browser = await launch(*args, **kwargs)
            tracer.watch(browser)
            return browser

        return launch_and_watch

    soak.launch_browser, launcher.launch_browser = watched(saved[0]), watched(saved[1])  # type: ignore[assignment]
    try:
        yield tracer
    finally:
        soak.launch_browser, launcher.launch_browser = saved  # type: ignore[assignment]
        await tracer.close()


def table(f: dict[str, Any], a: dict[str, Any]) -> list[str]:
    """Markdown rows: CPU ms per step by process kind, then the Python process's by phase."""
    rows = ["| CPU ms per step | floor | agent | agent − floor |", "|---|---|---|---|"]
    keys = {*f["split"], *a["split"]} - {"model server (not counted)"}
    parts = [k for k in keys if k.startswith((THREAD, STARTED))]  # within a process's figure, or counts
    kinds = sorted(keys - set(parts), key=lambda k: (k != "python", k))
    for kind in kinds:
        x, y = f["split"].get(kind, 0.0), a["split"].get(kind, 0.0)
        if max(abs(x), abs(y)) >= 0.05:
            rows.append(f"| {kind} | {x:.1f} | {y:.1f} | {y - x:+.1f} |")
    rows.append(
        f"| **all** | {f['cpu_per_step_ms']:.1f} | {a['cpu_per_step_ms']:.1f} | "
        f"{a['cpu_per_step_ms'] - f['cpu_per_step_ms']:+.1f} |"
    )
    for part in sorted(parts):  # threads: parts of the rows above (not added to them); then counts
        x, y = f["split"].get(part, 0.0), a["split"].get(part, 0.0)
        if max(abs(x), abs(y)) >= (0.005 if part.startswith(STARTED) else 0.05):
            label = f"({part.removeprefix(THREAD)}, within its process)" if part.startswith(THREAD) else f"({part})"
            digits = 3 if part.startswith(STARTED) else 1
            rows.append(f"| {label} | {x:.{digits}f} | {y:.{digits}f} | {y - x:+.{digits}f} |")
    if f["phases"] or a["phases"]:
        py_f, py_a = f["split"].get("python", 0.0), a["split"].get("python", 0.0)
        tot_f, tot_a = sum(f["phases"].values()) or 1, sum(a["phases"].values()) or 1
        for name, _ in PHASES:
            x = py_f * f["phases"].get(name, 0) / tot_f
            y = py_a * a["phases"].get(name, 0) / tot_a
            if x >= 0.05 or y >= 0.05:
                rows.append(f"| python: {name} | {x:.1f} | {y:.1f} | {y - x:+.1f} |")
        rows.append(f"| (py-spy itself, not counted) | {f['profiler_ms']:.1f} | {a['profiler_ms']:.1f} | |")
    model = a["split"].get("model server (not counted)")
    if model is not None:
        rows.append(f"| (model server, not counted) | | {model:.1f} | |")
    rows += ["", "| messages per step | floor | agent |", "|---|---|---|"]
    rows.append(f"| screenshots sent per step | {f['captures_per_step']:.2f} | {a['captures_per_step']:.2f} |")
    names = sorted(
        {*f["messages"], *a["messages"]}, key=lambda k: -max(f["messages"].get(k, 0), a["messages"].get(k, 0))
    )
    for name in names:
        x, y = f["messages"].get(name, 0.0), a["messages"].get(name, 0.0)
        if max(x, y) >= 0.05:
            rows.append(f"| {name} | {x:.2f} | {y:.2f} |")
    return rows


async def measure(args: argparse.Namespace, origin: str, workdir: Path, exclude: set[int], children: list[Any]) -> None:
    summary = []
    for n in (int(x) for x in args.sessions.split(",")):
        for r in range(args.repeat):
            f = await side("floor", args, n, origin, workdir / f"n{n}-r{r}", exclude, children)
            a = await side("agent", args, n, origin, workdir / f"n{n}-r{r}", exclude, children)
            rate, cpu = a["steps_per_s"] / f["steps_per_s"], a["cpu_per_step_ms"] / f["cpu_per_step_ms"]
            print(
                f"\nN={n} round {r + 1}: floor {f['steps_per_s']:.2f} steps/s, agent {a['steps_per_s']:.2f} "
                f"({rate:.2f}x); CPU/step floor {f['cpu_per_step_ms']:.0f} ms, agent {a['cpu_per_step_ms']:.0f} ms "
                f"({cpu:.2f}x); agent tasks {a['succeeded']}/{n} succeeded, {a['hung']} hung; floor {f['hung']} "
                f"hung, counts {dict(f['counts'])}\n",
                flush=True,
            )
            print("\n".join(table(f, a)), flush=True)
            if f["chromium_trace"] or a["chromium_trace"]:
                print("\n" + "\n".join(chrometrace.table(f["chromium_trace"], a["chromium_trace"])), flush=True)
            summary.append((n, r + 1, f, a, rate, cpu))
            if args.json:
                with open(args.json, "a") as out:  # noqa: ASYNC230 (once per round, between phases)
                    out.write(json.dumps(soak._plain({"n": n, "round": r + 1, "floor": f, "agent": a})) + "\n")
    print(
        "\n| N | round | floor steps/s | agent steps/s | agent/floor | CPU/step floor | CPU/step agent | agent/floor CPU |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n, r, f, a, rate, cpu in summary:
        print(
            f"| {n} | {r} | {f['steps_per_s']:.2f} | {a['steps_per_s']:.2f} | {rate:.2f} | "
            f"{f['cpu_per_step_ms']:.0f} ms | {a['cpu_per_step_ms']:.0f} ms | {cpu:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="10", help="comma-separated N values")
    parser.add_argument("--steps", type=int, default=10, help="steps per task, the answer included")
    parser.add_argument("--latency", type=float, default=1.0, help="model latency per call, seconds")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per N (floor, then agent)")
    parser.add_argument("--slow-ms", type=int, default=1000, help="how long the slow page takes to answer")
    parser.add_argument("--list-items", type=int, default=300, help="items of the long list")
    parser.add_argument("--guard", choices=("off", "allow"), default="off", help="the agent's guard (soak.py's)")
    parser.add_argument("--profile", action="store_true", help="the Python process's CPU by phase (py-spy)")
    parser.add_argument("--profile-rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument(
        "--chromium-trace",
        type=float,
        default=0.0,
        metavar="S",
        help="trace each side's browser for S seconds a third of the way in: thread time per step by task",
    )
    parser.add_argument(
        "--hog", type=int, default=0, metavar="N", help="N busy processes beside both sides (soak.py's)"
    )
    parser.add_argument("--seed", type=int, default=0, help="draws the tasks' plans")
    parser.add_argument("--json", metavar="FILE", help="append each round's figures to FILE (JSON lines)")
    parser.add_argument(
        "--executable", metavar="PATH", help="the Chromium binary of both sides (default: the agent's own choice)"
    )
    parser.add_argument("--keep", metavar="DIR", help="keep the runs and py-spy's raw stacks under DIR")
    args = parser.parse_args()
    if args.guard == "allow" and not args.executable:  # both sides on the binary a guarded agent gets (soak.py)
        args.executable = find_chromium(BrowserConfig(), hardened=True)
    configure_logging(0)
    children: list[subprocess.Popen[str]] = []
    site, origins = soak.start_site(children)
    hogs = soak.start_hogs(args.hog, children)  # not counted: only the phase's own processes are
    try:
        with contextlib.ExitStack() as stack:
            if args.keep:
                workdir = Path(args.keep)
            else:
                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="webagent-stepcpu-")))
            started = time.monotonic()
            asyncio.run(measure(args, origins[0], workdir, {site.pid, *hogs}, children))
            print(f"\n({time.monotonic() - started:.0f} s)")
    finally:
        for child in children:
            if child.pid in hogs:
                child.kill()
                child.wait()
        site.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            site.communicate(timeout=15)


if __name__ == "__main__":
    main()
