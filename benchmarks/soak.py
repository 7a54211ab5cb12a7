"""Soak benchmark: navigation-heavy tasks, the real agent through ``batch`` vs. a bare Playwright floor.

The site is its own (``benchmarks/soaksite/server.py``, one aiohttp process, not counted as harness):
two origins (``127.0.0.1:A`` and ``localhost:B``: another site, so Chromium swaps renderer processes
on every crossing; ``--host-resolver-rules`` maps ``localhost`` to 127.0.0.1 in both browsers), a
long list (2,000 items), an image gallery, a form that POSTs, a page that answers after 2-5 s, a page
whose image and fetch never answer, and a ``target=_blank`` link. Every page has the same fixed
column of eight 100-px links on the left, so the scripted localizer's fixed points always hit.

Each task is ``--steps`` steps (default 12): S-1 actions in an order drawn per task (so sessions are
not in lockstep), every task including the slow page and the never-answering request, then an answer
the validator accepts. The actions: link clicks (same origin, other origin, slow page, list, images,
form, hanging page, new tab), ``go_back``, two wheel scrolls of the list, a form field typed into and
submitted with Enter.

For each N of ``--sessions`` a round runs, in one process:

1. the floor: a plain Playwright loop (``direct_cdp`` off) over N contexts of one Chromium doing the
   same browser work per step — a screenshot at the model's size (one that does not come is recovered
   like the agent does: taken again on a new CDP session, then the page reopened in a new tab), the
   same click/scroll/typing/back,
   following the new tab, waiting for loads capped like the agent's settle (3 s) — and sleeping
   ``--latency`` per model call the agent makes at that step (policy; + localizer for clicks and
   typing; + validator for the answer);
2. the agent: ``BatchRunner`` with N concurrent sessions against the offline model server (its own
   process, not counted) answering after ``--latency`` per call.

With ``--hog N``, N busy processes (a Python ``while True: pass`` each, normal priority) run beside
both phases, started before the round and ended after it: the floor and the agent are measured
beside the same hog, in the same run. ``--freeze resume`` stops one Chromium main process of the
agent (SIGSTOP) at ``--freeze-at`` seconds for ``--freeze-for`` seconds, then lets it go on (SIGCONT);
``--freeze never`` never lets it go on (it is killed once the batch has ended). ``--browsers K``
spreads the agent's sessions over K browsers (so that a frozen one carries a share of them);
``--no-admission`` opens every session at once (the batch's admission control off).

Both phases have a hard deadline (``--deadline``, default from N and S): a session not finished by
then is reported as hung (for the agent: a task with no result line), with a dump of where the
stuck asyncio tasks wait; the benchmark itself never hangs (a watchdog thread ends it, with a
thread dump, if even the clean-up does not come back).

Printed per N: tasks finished and succeeded, sessions hung, stop reasons, captures recovered and
pages replaced (counted from the trajectories' ``recoveries``/``events``: ``RECOVERY_KINDS``),
steps/s of agent and floor and their ratio, CPU per step of each and their ratio, the sessions open
at once on each side (the floor's from its first page loaded, the agent's from its tab), PSS per session,
step latency p50/p90 (screenshot to end of the action, model waits included).

    python benchmarks/soak.py --sessions 100,200,500 --steps 12 --latency 1.0
    python benchmarks/soak.py --sessions 5,20 --repeat 1 --json soak.json
    python benchmarks/soak.py --sessions 500 --hog 4 --latency 1.0            # an overloaded machine
    python benchmarks/soak.py --sessions 100 --only agent --hog 2 --browsers 2 --freeze resume
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The pieces: soak_tasks.py (the site and the tasks), soak_floor.py (a floor session), soak_agent.py
# (the agent's phase), soak_faults.py (--kill, --freeze, --hog), soak_hangs.py (deadlines, task
# dumps, the watchdog), soak_report.py (figures and tables). The floor's phase stays here: stepcpu.py
# wraps ``soak.launch_browser`` to trace its browser. Other benchmarks' names are re-exported (__all__).
from procmeter import Meter, steady
from soak_agent import EVENT_KINDS, RECOVERY_KINDS, agent, trajectory_counts
from soak_faults import start_hogs
from soak_floor import AFTER, COMMAND_S, FAILED, SETTLE_S, FloorSession
from soak_hangs import Watchdog, dump_tasks, kill_descendants, report_stuck, wait_phase
from soak_report import _plain, median_round, open_sessions, percentile, print_row, report
from soak_tasks import RESOLVER_RULE, SITE, Act, _delta, model_calls, plan_for, site_stats, start_site, start_url
from soaksite.server import VIEWPORT

from webagent.browser.launcher import find_chromium, launch_browser
from webagent.browser.pool import OPENS_AT_ONCE
from webagent.cli import configure_logging
from webagent.config import PROFILES, BrowserConfig
from webagent.families import DEFAULT_PROFILE
from webagent.images import frame_for

__all__ = [
    "EVENT_KINDS",
    "RECOVERY_KINDS",
    "RESOLVER_RULE",
    "SITE",
    "Act",
    "FloorSession",
    "_plain",
    "agent",
    "default_deadline",
    "floor",
    "launch_browser",
    "main",
    "measure",
    "measure_round",
    "plan_for",
    "start_hogs",
    "start_site",
    "start_url",
    "trajectory_counts",
]


# -- the floor ----------------------------------------------------------------------------------------
async def floor(
    plans: list[list[Act]],
    urls: list[str],
    latency: float,
    exclude: set[int],
    limits: tuple[float, float],
    workdir: Path,
    executable: str | None = None,
) -> dict[str, Any]:
    n = len(plans)
    config = BrowserConfig(
        contexts_per_browser=max(n, 1), direct_cdp=False, args=[RESOLVER_RULE], executable_path=executable
    )
    frame = frame_for(*VIEWPORT, PROFILES[DEFAULT_PROFILE])
    ends: list[float] = []
    step_s: list[float] = []
    counts: collections.Counter[str] = collections.Counter()
    finished = [0]
    # As the agent's pool opens them (a few at a time per browser): hundreds of new contexts and
    # first loads at once all wait on Chromium's one UI thread, and under load none gets through.
    opening = asyncio.Semaphore(OPENS_AT_ONCE)
    live = [0]  # sessions open (their first page loaded), not ended yet
    opened: list[tuple[float, int]] = []  # (time, sessions open)

    async def session(i: int) -> None:
        s = FloorSession(browser, frame, config, counts)
        async with opening:
            await s.open(urls[i])
        live[0] += 1
        try:
            await run(s, i)
        finally:
            live[0] -= 1

    async def count_open() -> None:
        while True:
            opened.append((time.monotonic(), live[0]))
            await asyncio.sleep(0.5)

    async def run(s: FloorSession, i: int) -> None:
        steps: list[Act | None] = [*plans[i], None]  # None: the answer
        for act in steps:
            t0 = time.monotonic()
            await s.shoot()
            await asyncio.sleep(latency * model_calls(act))
            if act is not None:
                s.last = f"{act[0]} {act[1]}".strip()
                try:
                    async with asyncio.timeout(COMMAND_S + SETTLE_S):
                        await s.act(act, i)
                except (PlaywrightError, TimeoutError) as exc:
                    counts["actions_failed"] += 1
                    counts[f"{FAILED}{(str(exc) or type(exc).__name__).splitlines()[0][:70]}"] += 1
            ends.append(time.monotonic())
            step_s.append(ends[-1] - t0)
        finished[0] += 1
        with contextlib.suppress(PlaywrightError, TimeoutError):
            async with asyncio.timeout(COMMAND_S):
                await s.context.close()

    hung = 0
    async with async_playwright() as pw:
        with Meter(exclude) as meter:
            browser = await launch_browser(pw, config)
            tasks = {asyncio.create_task(session(i), name=f"floor-{i}") for i in range(n)}
            counter = asyncio.create_task(count_open(), name="count-open")
            started = time.monotonic()
            try:
                why = await wait_phase(tasks, *limits, lambda: ends[-1] if ends else started)
            finally:
                counter.cancel()
            pending = {t for t in tasks if not t.done()}
            done = tasks - pending
            hung = len(pending)
            stuck: list[tuple[str, int]] = []
            if pending:
                dump = workdir / "floor-tasks.txt"
                stuck = dump_tasks(dump, lambda name, _: name.startswith("floor-"))
                report_stuck("floor", f"{why}: {hung} sessions left", dump, stuck)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=30)
            errors = [t.exception() for t in done if not t.cancelled() and t.exception() is not None]
            kinds = collections.Counter(f"{type(e).__name__}: {str(e).splitlines()[0][:120]}" for e in errors)
            for what, count in kinds.most_common(3):
                print(f"  floor: {count} sessions ended by {what}", flush=True)
            if errors:
                where = "".join(traceback.format_exception(errors[0])[-6:])
                print(f"  floor: the first of them, where it was raised:\n{where}", flush=True)
            with contextlib.suppress(PlaywrightError, TimeoutError):
                async with asyncio.timeout(60):
                    await browser.close()
    rate, cpu, split = steady(ends, meter) if len(ends) >= 10 else (float("nan"), float("nan"), {})
    other = {k: v for k, v in counts.items() if not k.startswith((FAILED, AFTER))}
    failures = collections.Counter({k[len(FAILED) :]: v for k, v in counts.items() if k.startswith(FAILED)})
    after = {k[len(AFTER) :]: v for k, v in counts.items() if k.startswith(AFTER)}
    return {
        "sessions": n,
        "finished": finished[0],
        "hung": hung,
        "stuck": stuck,
        "errors": len(errors),
        "steps": len(ends),
        "steps_per_s": rate,
        "cpu_per_step_ms": cpu,
        "split": split,
        "pss_mib": meter.peak_kib / 1024 / max(n, 1),
        **open_sessions(opened, ends),
        "step_p50_s": percentile(step_s, 0.5),
        "step_p90_s": percentile(step_s, 0.9),
        "counts": other,
        "capture_timeouts_after": after,
        "top_failures": failures.most_common(3),
    }


# -- running it ---------------------------------------------------------------------------------------
def default_deadline(n: int, steps: int, latency: float) -> float:
    """Generous: a step's model waits and capped loads, plus 0.5 s of machine per step of all N sessions
    (this 2-core machine does about 0.2)."""
    return 120 + steps * (3 * latency + 10) + 0.5 * n * steps


async def measure_round(
    args: argparse.Namespace, n: int, origins: list[str], workdir: Path, exclude: set[int], children: list[Any]
) -> dict[str, Any]:
    plans_and_ms = [plan_for(i, args.steps - 1, args.seed) for i in range(n)]
    plans = [p for p, _ in plans_and_ms]
    urls = [start_url(origins[0], i, ms) for i, (_, ms) in enumerate(plans_and_ms)]
    deadline = args.deadline or default_deadline(n, args.steps, args.latency)
    limits = (deadline, args.stall)
    row: dict[str, Any] = {"n": n, "deadline_s": deadline}
    workdir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once per round)
    if args.only in (None, "floor"):
        before = site_stats(origins[0], reset_peak=True)
        with Watchdog(deadline + 300, f"the floor at N={n}", children):
            row["floor"] = await floor(plans, urls, args.latency, exclude, limits, workdir, args.executable)
        row["floor"]["site"] = _delta(before, site_stats(origins[0]))
    if args.only in (None, "agent"):
        before = site_stats(origins[0], reset_peak=True)
        with Watchdog(deadline + 300, f"the agent at N={n}", children):
            row["agent"] = await agent(plans, urls, args.latency, workdir, exclude, limits, children, args)
        row["agent"]["site"] = _delta(before, site_stats(origins[0]))
    print_row(row)
    return row


async def measure(
    args: argparse.Namespace,
    sessions: list[int],
    origins: list[str],
    workdir: Path,
    exclude: set[int],
    children: list[Any],
) -> list[dict[str, Any]]:
    rows = []
    for n in sessions:
        rounds = []
        for r in range(args.repeat):
            rounds.append(await measure_round(args, n, origins, workdir / f"n{n}-r{r}", exclude, children))
        rows.append(median_round(rounds))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", default="100", help="comma-separated N values (e.g. 100,200,500)")
    parser.add_argument("--steps", type=int, default=12, help="steps per task, the answer included (at least 3)")
    parser.add_argument("--latency", type=float, default=1.0, help="model latency per call, seconds")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per N (floor, then agent); the median is tabled")
    parser.add_argument(
        "--deadline", type=float, default=0.0, help="hard limit of each phase, seconds (0: from N, steps and latency)"
    )
    parser.add_argument(
        "--stall",
        type=float,
        default=120.0,
        help="end a phase early when no session has finished a step for this long, seconds (the rest are hung)",
    )
    parser.add_argument(
        "--command-timeout",
        type=float,
        default=0.0,
        help="the agent's browser.command_timeout_s (0: its default; opening N tabs at once takes longer at large N)",
    )
    parser.add_argument(
        "--kill",
        choices=("browser", "renderers", "setup"),
        default=None,
        help="in the agent phase, kill -9 the browser's main process at 30 s, four renderers at 12-20 s, or "
        "(setup) four renderers while the sessions are set up, before the first step ends",
    )
    parser.add_argument("--hog", type=int, default=0, metavar="N", help="N busy processes beside both phases")
    parser.add_argument(
        "--freeze",
        choices=("resume", "never"),
        default=None,
        help="in the agent phase, SIGSTOP one Chromium at --freeze-at s: SIGCONT it --freeze-for s later, or never",
    )
    parser.add_argument("--freeze-at", type=float, default=20.0, help="seconds into the agent phase (default 20)")
    parser.add_argument("--freeze-for", type=float, default=60.0, help="seconds frozen with --freeze resume")
    parser.add_argument(
        "--executable", metavar="PATH", help="the Chromium binary of both sides (default: the agent's own choice)"
    )
    parser.add_argument("--browsers", type=int, default=1, help="browsers the agent's sessions are spread over")
    parser.add_argument("--no-admission", action="store_true", help="the agent opens every session at once")
    parser.add_argument(
        "--workers",
        default="auto",
        help="the agent's worker processes (batch --workers: default auto, one per 100 sessions, at most one per CPU)",
    )
    parser.add_argument(
        "--guard",
        choices=("off", "allow"),
        default="off",
        help="the agent's navigation guard: off (local start URLs: none), allow (both origins in allowed_domains: "
        "every request judged, the proxy net, hardened browsers)",
    )
    parser.add_argument("--seed", type=int, default=0, help="draws the tasks' orders and slow-page delays")
    parser.add_argument("--only", choices=("agent", "floor"), default=None, help="run one side only")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON ('-': stdout)")
    parser.add_argument("--keep", metavar="DIR", help="keep the agent's runs (trajectories, task dumps) under DIR")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="the agent's log: -v info, -vv debug")
    args = parser.parse_args()
    configure_logging(args.verbose)  # warnings (a screenshot retaken, ...) to stderr
    if args.steps < 3:
        parser.error("--steps must be at least 3")
    sessions = [int(x) for x in args.sessions.split(",")]
    if args.guard == "allow" and not args.executable:  # both sides on the binary a guarded agent gets
        args.executable = find_chromium(BrowserConfig(), hardened=True)
    children: list[subprocess.Popen[str]] = []
    site, origins = start_site(children)
    print(f"soak site: {' '.join(origins)}", flush=True)
    print(
        f"chromium: {find_chromium(BrowserConfig(executable_path=args.executable)) or 'Playwright bundled'}", flush=True
    )
    exclude = {site.pid}  # the site server is not the harness
    hogs = start_hogs(args.hog, children)  # nor are the hogs
    exclude |= set(hogs)
    if hogs:
        print(f"hog: {len(hogs)} busy processes beside both phases", flush=True)
    loop = asyncio.new_event_loop()
    abandoned = False
    try:
        with contextlib.ExitStack() as stack:
            if args.keep:
                workdir = Path(args.keep)
                workdir.mkdir(parents=True, exist_ok=True)
            else:
                workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="webagent-soak-")))
            rows = loop.run_until_complete(measure(args, sessions, origins, workdir, exclude, children))
        abandoned = any(row.get("agent", {}).get("abandoned") for row in rows)
        if not abandoned:  # else the loop's stuck tasks are left as they are (cancelling them could hang)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
    finally:
        for child in children:
            if child.pid in hogs:
                child.kill()
                child.wait()
        site.terminate()
        try:
            out, _ = site.communicate(timeout=15)
            if out.strip():
                print(f"soak site totals: {out.strip().splitlines()[-1]}", flush=True)
        except subprocess.TimeoutExpired:
            site.kill()
    report(args, rows)
    if args.json:
        text = json.dumps(_plain({"args": vars(args), "rows": rows}), indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    if abandoned:  # an agent phase that would not end: its tasks and browser are still up
        kill_descendants()
        os._exit(0)


if __name__ == "__main__":
    main()
