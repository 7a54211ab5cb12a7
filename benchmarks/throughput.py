"""Throughput benchmark: the real agent through ``batch`` vs. the bare-browser floor, side by side.

For each N it runs, on the same local page (a counter button: every click costs the same):

1. the floor: a plain Playwright loop over N contexts of one Chromium, each doing S x (screenshot at the
   model's size + click on the button), timed from context creation to context close;
2. the agent: ``BatchRunner`` with N concurrent sessions against the offline model server (a separate
   process, not counted) answering after a fixed latency per call; each task is S steps (S-1 clicks + an
   answer checked by the validator), timed the same way.

The floor is the whole-batch one by default (``--floor whole``, ``wholefloor.py``): a fresh
context per task, the agent's model latency per step, timed from the launch to the last close with
the same process-tree CPU instrument as the agent; ``--floor steady`` is the steady-state loop
above (its middle 80 % of steps), ``--floor steady,whole`` runs both. Against the whole-batch
floor it prints steps/s, CPU per step, DevTools commands (``Runtime.evaluate`` and all) per step of
both sides, and per N the agent's tasks per hour, success rate, model tokens per task and cost per
task at ``--price-per-mtok``. Both sides are admitted alike (``wholefloor.py``: the batch's
``Admission``, the pool's ``OPENS_AT_ONCE``). Each side's figures are printed as soon as it ends; a
side that fails prints its one-line error, the others still run and print, and the exit code is 1.
Before the measured rounds, ``--warm-up`` (on by default) runs the agent and each floor once at 10
sessions (fewer if every N is), 2 steps, unmeasured; a failure there is printed and not counted.

Against the steady-state floor it prints steps/s of both and their ratio, the ideal steps/s given the model latency, CPU per step,
memory per session (PSS of Chromium + this Python process, divided by the sessions open at its peak), harness overhead per step
(step wall time minus model wait), tasks lost, and the policy prompt tokens at step 3 and step 30.

With ``--grounding localizer,policy`` (and a ``--policy-family`` that places its own clicks) the agent
runs once per grounding mode at each N, and the wall time per click step (median over the runs'
click steps) of each is printed, with the grounded step's against the three-role step's.

    python benchmarks/throughput.py --sessions 50,100,200,500 --steps 10 --latency 1.0 --floor steady,whole
    python benchmarks/throughput.py --sessions 10,100 --steps 10 --latency 1.0 --token-steps 0 \
        --policy-family holo3.1 --grounding localizer,policy
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright

from webagent.browser.launcher import launch_browser
from webagent.config import BrowserConfig
from webagent.families import FAMILIES

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The pieces (the names other benchmarks import from here are re-exported: ``__all__``).
from procmeter import (
    NOT_COUNTED,
    STARTED,
    THREAD,
    THREADED,
    TICK,
    Meter,
    _age_s,
    _children,
    _kind,
    cpu_s,
    monitor,
    process_tree,
    pss_kib,
    steady,
    thread_cpu_s,
)
from throughput_agent import (
    POLICY_FAMILY,
    OfflineServer,
    agent,
    bench_script,
    click_step_seconds,
    prompt_tokens,
    write_tasks,
)
from throughput_report import (
    IMAGE_TOKENS,
    median_round,
    print_whole_side,
    ratio,
    report,
    report_steady,
    report_whole,
)
from wholefloor import BUTTON, capture_params, count_cdp, whole_figures, whole_floor

__all__ = [
    "BUTTON",
    "FAILED",
    "IMAGE_TOKENS",
    "NOT_COUNTED",
    "POLICY_FAMILY",
    "STARTED",
    "THREAD",
    "THREADED",
    "TICK",
    "Meter",
    "OfflineServer",
    "_age_s",
    "_children",
    "_kind",
    "agent",
    "bench_script",
    "click_step_seconds",
    "cpu_s",
    "floor",
    "floor_whole",
    "main",
    "measure",
    "measure_round",
    "median_round",
    "monitor",
    "process_tree",
    "prompt_tokens",
    "pss_kib",
    "ratio",
    "report",
    "report_steady",
    "report_whole",
    "side",
    "steady",
    "thread_cpu_s",
    "write_tasks",
]


#: The one-line errors of the sides that failed (the exit code is 1 where any did).
FAILED: list[str] = []
#: Sessions of the unmeasured warm-up round (``--warm-up``; the smallest N if it is smaller).
WARM_UP_SESSIONS = 10


# -- the floor ------------------------------------------------------------------------------------
async def floor(
    url: str, n: int, steps: int, exclude: set[int], pause: float = 0.0, burn_ms: float = 0.0
) -> dict[str, Any]:
    """The bare loop; ``pause``: sleep that long per step, where the agent waits on its models;
    ``burn_ms``: spend that much CPU in this process per step (what Python work costs the rest)."""
    config = BrowserConfig(contexts_per_browser=max(n, 1), direct_cdp=False)  # a plain Playwright loop
    params = capture_params(config)
    ends: list[float] = []
    async with async_playwright() as pw:

        async def session() -> None:
            context = await browser.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
            page = await context.new_page()
            await page.goto(url, timeout=300_000)
            # A page just loaded may have no frame to capture yet ("Unable to capture screenshot").
            await page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
            cdp = await context.new_cdp_session(page)
            for i in range(steps):
                await cdp.send("Page.captureScreenshot", params)
                if pause:
                    await asyncio.sleep(pause)
                if i < steps - 1:
                    await page.mouse.click(*BUTTON)
                if burn_ms:
                    until = time.process_time() + burn_ms / 1000
                    while time.process_time() < until:
                        pass
                ends.append(time.monotonic())
            await context.close()

        with Meter(exclude) as meter:  # like the agent's batch: launch, contexts, steps, close
            browser = await launch_browser(pw, config)
            await asyncio.gather(*(session() for _ in range(n)))
            await browser.close()
    rate, cpu, split = steady(ends, meter)
    return {"steps_per_s": rate, "cpu_per_step_ms": cpu, "pss_mib": meter.peak_kib / 1024 / n, "split": split}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="1,10,50,100,200", help="comma-separated N values")
    parser.add_argument("--steps", type=int, default=10, help="steps per task (S)")
    parser.add_argument("--latency", type=float, default=1.0, help="model latency per call, seconds")
    parser.add_argument("--token-steps", type=int, default=30, help="steps of the prompt-size run (0: skip)")
    parser.add_argument(
        "--floor-burn-ms",
        type=float,
        default=0.0,
        help="also run the floor spending this much CPU in Python per step, and print it (a calibration: "
        "what a millisecond of harness Python costs the browser at this N)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds per N (floor, agent, floor with waits); the median round is tabled",
    )
    parser.add_argument(
        "--floor",
        default="whole",
        help="comma-separated floors to run at each N: whole (the whole-batch floor: a fresh context per task, "
        "the agent's model latency per step, launch to last close; what the ratios are taken against where it "
        "runs) and steady (the middle 80%% of steps of a loop on contexts opened up front)",
    )
    parser.add_argument(
        "--warm-up",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=f"first run the agent and each floor once at {WARM_UP_SESSIONS} sessions (fewer if every N is), 2 steps, "
        "not measured (the first round would otherwise pay this process's first use of the agent's code)",
    )
    parser.add_argument(
        "--price-per-mtok",
        type=float,
        default=1.0,
        help="model price in dollars per million tokens (prompt and completion alike), for the cost per task",
    )
    parser.add_argument(
        "--grounding",
        default="",
        help="comma-separated grounding modes to run the agent in at each N (localizer, policy); the first is "
        "the one tabled against the floor, and the wall time per click step of each is printed",
    )
    parser.add_argument(
        "--policy-family",
        choices=list(FAMILIES),
        help="the agent's policy family (what its requests ask of the image processor; the screenshots "
        "and so the browser work are the same); the floor does not change",
    )
    args = parser.parse_args()
    POLICY_FAMILY[0] = args.policy_family
    floors = set(args.floor.split(","))
    if not floors or not floors <= {"steady", "whole"}:
        parser.error(f"--floor: {args.floor!r}: expected steady, whole or steady,whole")
    sessions = [int(x) for x in args.sessions.split(",")]
    rows: list[dict[str, Any]] = []
    sites = subprocess.Popen([sys.executable, "-m", "webagent.testing.sites"], stdout=subprocess.PIPE, text=True)
    assert sites.stdout is not None
    url = sites.stdout.readline().strip().rsplit(" ", 1)[-1] + "/bench/"
    exclude = {sites.pid}  # the site server is not the harness
    try:
        with tempfile.TemporaryDirectory(prefix="webagent-bench-") as tmp:
            rows, tokens = asyncio.run(measure(args, sessions, url, Path(tmp), exclude))
    finally:
        sites.terminate()
        sites.wait(10)
    report(args, rows, tokens)
    if FAILED:
        print("\nfailed:\n" + "\n".join(FAILED), flush=True)
        sys.exit(1)


async def measure(
    args: argparse.Namespace, sessions: list[int], url: str, workdir: Path, exclude: set[int]
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    rows = []
    if args.warm_up:
        await warm_up(args, min(WARM_UP_SESSIONS, *sessions), url, workdir, exclude)
    for n in sessions:
        rounds = [await measure_round(args, n, url, workdir, exclude, r) for r in range(args.repeat)]
        rows.append(median_round(rounds))
    tokens: dict[int, int] = {}
    if args.token_steps:
        t = await agent(url, 1, args.token_steps, 0.0, workdir, exclude)
        tokens = prompt_tokens(t["out"])
    return rows, tokens


async def warm_up(args: argparse.Namespace, n: int, url: str, workdir: Path, exclude: set[int]) -> None:
    """One round at ``n`` sessions, 2 steps, not measured: the agent (in the first ``--grounding``),
    then each floor of ``--floor``, so that this process's first use of the agent's code (templates
    compiled, schemas built) and of Chromium's files is not paid by the first side measured. A side
    that fails here prints its error and is not counted: the measured rounds report their own."""
    out = workdir / "warm-up"
    out.mkdir(exist_ok=True)
    floors = set(args.floor.split(","))
    grounding = next((g for g in args.grounding.split(",") if g), None)
    start = time.monotonic()
    ran: list[str] = []

    async def warm(what: str, run: Awaitable[dict[str, Any]]) -> dict[str, Any] | None:
        result = await side(f"warm-up {what}", n, run, counted=False)  # the measured rounds report their own
        if result is not None:
            ran.append(what)
        return result

    a = await warm("agent", agent(url, n, 2, args.latency, out, exclude, grounding))
    if "whole" in floors:
        pause = a["model_s_per_step"] if a is not None else 2 * args.latency
        await warm("whole-batch floor", floor_whole(url, n, 2, pause, exclude))
    if "steady" in floors:
        await warm("steady floor", floor(url, n, 2, exclude))
    took = time.monotonic() - start
    print(f"warm-up: {', '.join(ran) or 'nothing'} at {n} sessions, 2 steps, not measured ({took:.0f} s)", flush=True)


async def floor_whole(url: str, n: int, steps: int, pause: float, exclude: set[int]) -> dict[str, Any]:
    """The whole-batch floor (``wholefloor.py``), measured like the agent's batch."""
    with Meter(exclude) as meter, count_cdp() as cdp:
        run = await whole_floor(url, n, steps, pause, meter)
    open_at_once = max(run.get("peak_sessions") or n, 1)  # admission may hold fewer than n open
    return {
        **whole_figures(run, meter),
        "cdp": cdp.per_step(run["steps"]),
        "pss_mib": meter.peak_kib / 1024 / open_at_once,
    }


async def side(what: str, n: int, run: Awaitable[dict[str, Any]], *, counted: bool = True) -> dict[str, Any] | None:
    """One side's figures, or None where it failed: its one-line error printed (and, ``counted``,
    kept for the exit code), so that the other side still runs and prints its own."""
    try:
        return await run
    except Exception as exc:  # any failure of a side: the benchmark goes on with the other
        text = str(exc).strip()
        line = f"N={n:<4} {what} FAILED: {type(exc).__name__}: {text.splitlines()[0] if text else ''}"
        print(line if counted else f"{line} (not counted)", flush=True)
        if counted:
            FAILED.append(line)
        return None


async def measure_round(
    args: argparse.Namespace, n: int, url: str, workdir: Path, exclude: set[int], round_: int
) -> dict[str, Any]:
    """One round at N sessions: the steady-state floor (``--floor steady``), the agent, then the
    whole-batch floor (``--floor whole``) and, with latency, the steady floor with the agent's waits.
    Each side's figures are printed as soon as it ends; a side that fails prints its error instead."""
    floors = set(args.floor.split(","))
    f = await side("steady floor", n, floor(url, n, args.steps, exclude)) if "steady" in floors else None
    if f is not None and args.floor_burn_ms:
        b = await floor(url, n, args.steps, exclude, burn_ms=args.floor_burn_ms)
        print(
            f"N={n:<4} floor + {args.floor_burn_ms:g} ms of Python per step {b['steps_per_s']:6.1f} steps/s "
            f"({b['steps_per_s'] / f['steps_per_s']:.2f} of the floor), cpu/step {b['cpu_per_step_ms']:.0f} ms "
            f"(floor {f['cpu_per_step_ms']:.0f} ms)\n       by process: {b['split']}",
            flush=True,
        )
    (workdir / f"round-{round_}").mkdir(exist_ok=True)
    groundings = [g for g in args.grounding.split(",") if g] or [None]
    out = workdir / f"round-{round_}"
    a = await side("agent", n, agent(url, n, args.steps, args.latency, out, exclude, groundings[0]))
    if a is not None:
        print_whole_side(n, "agent", a["whole"], a["pss_mib"], a["cdp"])
        clicks = {groundings[0]: a["click_step_s"]}
        for grounding in groundings[1:]:
            other = await agent(url, n, args.steps, args.latency, out, exclude, grounding)
            clicks[grounding] = other["click_step_s"]
        if len(clicks) > 1:
            first = clicks[groundings[0]]
            print(
                f"N={n:<4} wall time per click step: "
                + ", ".join(f"{g} {t:.3f} s ({t / first:.2f} of {groundings[0]})" for g, t in clicks.items()),
                flush=True,
            )
    # The floor's model wait per step: the agent's (mean over its steps, queueing included); where
    # the agent failed, its two calls a click step (policy and localizer) at --latency.
    pause = a["model_s_per_step"] if a is not None else 2 * args.latency
    ideal = n / pause if pause > 0 else float("inf")
    row: dict[str, Any] = {"n": n, "steady": f, "agent": a, "ideal": ideal, "waits": None, "whole": None}
    if "whole" in floors:
        wf = row["whole"] = await side("whole-batch floor", n, floor_whole(url, n, args.steps, pause, exclude))
        if wf is not None:
            print_whole_side(n, "whole-batch floor", wf, wf["pss_mib"], wf["cdp"])
        if wf is not None and a is not None:
            aw = a["whole"]
            print(
                f"N={n:<4} whole batch: agent/floor steps/s {aw['steps_per_s'] / wf['steps_per_s']:.2f}  "
                f"cpu/step x{aw['cpu_per_step_ms'] / wf['cpu_per_step_ms']:.2f}",
                flush=True,
            )
    if f is None or a is None:
        return row
    target = min(ideal, f["steps_per_s"])
    # Like for like: the same loop sleeping, per step, as long as the agent waited on its models
    # (the same browser work in the same rhythm, without the harness).
    w = row["waits"] = (
        await side("steady floor with waits", n, floor(url, n, args.steps, exclude, pause=pause))
        if args.latency > 0
        else None
    )
    if w is not None:
        print(
            f"N={n:<4} floor with the agent's model waits {w['steps_per_s']:6.1f} steps/s "
            f"cpu/step {w['cpu_per_step_ms']:.0f} ms; agent/that {a['steps_per_s'] / w['steps_per_s']:.2f}",
            flush=True,
        )
    print(
        f"N={n:<4} steady: floor {f['steps_per_s']:6.1f} steps/s  agent {a['steps_per_s']:6.1f} steps/s  "
        f"ratio {a['steps_per_s'] / f['steps_per_s']:.2f}  ideal {ideal:6.1f}  "
        f"agent/min(ideal,floor) {a['steps_per_s'] / target:.2f}  "
        f"cpu/step floor {f['cpu_per_step_ms']:.0f} ms agent {a['cpu_per_step_ms']:.0f} ms "
        f"(x{a['cpu_per_step_ms'] / f['cpu_per_step_ms']:.2f})  "
        f"PSS/session floor {f['pss_mib']:.0f} MiB agent {a['pss_mib']:.0f} MiB  "
        f"overhead p50 {a['overhead_ms_p50']:.0f} ms  lost {a['lost']}\n"
        f"       CPU ms/step by process (middle 80% of steps): floor {f['split']}  agent {a['split']}",
        flush=True,
    )
    return row


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--monitor":
        monitor(int(sys.argv[2]), {int(x) for x in sys.argv[3:]})
    else:
        main()
