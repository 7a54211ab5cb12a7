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
import faulthandler
import gc
import inspect
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.async_api import Error as PlaywrightError
from playwright.async_api import async_playwright

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from soaksite.server import ELEMENTS, READY_PREFIX, VIEWPORT  # noqa: E402
from throughput import Meter, OfflineServer, _children, _kind, cpu_s, process_tree, steady  # noqa: E402

from webagent.batch import BatchRunner, BatchStats, read_results  # noqa: E402
from webagent.batch.processes import auto_workers  # noqa: E402
from webagent.batch.stats import infra_cause  # noqa: E402
from webagent.browser.launcher import find_chromium, launch_browser  # noqa: E402
from webagent.browser.pool import OPENS_AT_ONCE  # noqa: E402
from webagent.browser.scripts import TWO_FRAMES, VIEW_AFTER_FRAME, VIEW_NOW  # noqa: E402
from webagent.cli import configure_logging  # noqa: E402
from webagent.config import PROFILES, BrowserConfig  # noqa: E402
from webagent.families import DEFAULT_PROFILE  # noqa: E402
from webagent.images import frame_for  # noqa: E402
from webagent.tasks import load_tasks  # noqa: E402
from webagent.testing.offline import offline_config  # noqa: E402

SITE = HERE / "soaksite" / "server.py"
#: Both browsers resolve the second origin's host to 127.0.0.1 (Chromium would try ::1 first).
RESOLVER_RULE = "--host-resolver-rules=MAP localhost 127.0.0.1"
ANSWER = "soak done"
SETTLE_S = BrowserConfig().settle_timeout_s  # the agent's cap on waiting for a load after an action
CAPTURE_S = BrowserConfig().capture_timeout_s
AFTER = "capture timeout after: "  # floor counters: capture timeouts by the action before them
FAILED = "failed: "  # floor counters: failed actions by their error
COMMAND_S = BrowserConfig().command_timeout_s
NAVIGATION_S = BrowserConfig().navigation_timeout_s

# -- the tasks --------------------------------------------------------------------------------------
#: An action of a plan: (kind, argument): ("click", element), ("write", element), ("scroll", "down"),
#: ("back", "").
Act = tuple[str, str]
BLOCKS: dict[str, list[Act]] = {
    "slow": [("click", "slow page link")],
    "hang": [("click", "hanging page link")],
    "list": [("click", "long list link"), ("scroll", "down"), ("scroll", "down")],
    "form": [("click", "form page link"), ("write", "form text field")],
    "newtab": [("click", "new tab link")],
    "cross": [("click", "other-origin page link")],
    "back": [("back", "")],
    "images": [("click", "image gallery link")],
    "same": [("click", "same-origin page link")],  # not in BASE: every other link but one is same-origin too
}
#: One of each (11 actions: with the answer, the 12 steps of the default task).
BASE = ["slow", "hang", "list", "form", "newtab", "cross", "back", "images"]
#: What the block before a go_back may not be: none (the start page), a new tab (no history), the slow
#: page (its navigation may still be pending: back would leave the start page), another back.
NO_BACK_AFTER = {None, "newtab", "slow", "back"}


def _cut(blocks: list[str], room: int) -> list[tuple[str, list[Act]]]:
    """The first blocks, up to ``room`` actions (the last one cut short if it does not fit)."""
    out: list[tuple[str, list[Act]]] = []
    for block in blocks:
        if room <= 0:
            break
        out.append((block, BLOCKS[block][:room]))
        room -= len(out[-1][1])
    return out


def plan_for(index: int, actions: int, seed: int = 0) -> tuple[list[Act], int]:
    """The actions of task ``index`` (in an order drawn for it) and its slow page's delay in ms.

    Shuffled copies of ``BASE`` laid end to end, cut at ``actions``; the slow page and the hanging page
    are always in (a short plan makes room for them), and no go_back follows a block in ``NO_BACK_AFTER``."""
    rng = random.Random(seed * 1_000_003 + index)
    slow_ms = rng.randint(2000, 5000)
    must = ("slow", "hang")
    cut: list[tuple[str, list[Act]]] = []
    for _ in range(1000):
        blocks: list[str] = []
        while len(blocks) < actions + len(BASE):
            chunk = BASE[:]
            rng.shuffle(chunk)
            blocks += chunk
        cut = _cut(blocks, actions)
        if any(m not in (name for name, _ in cut) for m in must):  # a short plan: make room for them
            cut = _cut([b for b in blocks if b not in must], actions - len(must))
            for m in must:
                cut.insert(rng.randrange(len(cut) + 1), (m, BLOCKS[m]))
        names = [name for name, _ in cut]
        if all(b != "back" or (names[i - 1] if i else None) not in NO_BACK_AFTER for i, b in enumerate(names)):
            break
    return [act for _, acts in cut for act in acts], slow_ms


def model_calls(act: Act | None) -> int:
    """Model calls the agent makes at a step: policy, + localizer (click, write) or validator (answer)."""
    return 2 if act is None or act[0] in ("click", "write") else 1


def policy_action(act: Act, index: int) -> dict[str, Any]:
    kind, arg = act
    if kind == "click":
        return {"action": "click_element", "element": arg}
    if kind == "write":
        return {"action": "write_element", "element": arg, "content": f"soak {index}", "press_enter": True}
    if kind == "scroll":
        return {"action": "scroll", "direction": arg}
    return {"action": "go_back"}


def task_tag(index: int) -> str:
    return f"[soak-{index:04d}]"


def pss_per_open_session(pss: list[tuple[float, int]], opened: list[tuple[float, int]]) -> dict[str, float]:
    """PSS per session counted over the sessions open at each moment, not all N: with hundreds of
    tasks, sessions open a few at a time per browser and the first close before the last open.
    The peak of open sessions, and PSS per open session at the PSS peak and at the open peak."""
    if not pss or not opened:
        return {"open_peak": float("nan"), "pss_per_open_mib": float("nan"), "pss_at_open_peak_mib": float("nan")}

    def open_at(t: float) -> int:
        return min(opened, key=lambda o: abs(o[0] - t))[1]

    def pss_at(t: float) -> int:
        return min(pss, key=lambda p: abs(p[0] - t))[1]

    t_pss, peak = max(pss, key=lambda p: p[1])
    t_open, most = max(opened, key=lambda o: o[1])
    return {
        "open_peak": float(most),
        "pss_per_open_mib": peak / 1024 / max(open_at(t_pss), 1),
        "pss_at_open_peak_mib": pss_at(t_open) / 1024 / max(most, 1),
    }


def open_sessions(opened: list[tuple[float, int]], ends: list[float]) -> dict[str, float]:
    """The sessions open at once: their peak, and their mean over the middle 80% of the steps (the
    window of steps/s). Fewer open than running means the sessions wait for their turn to open
    (``OPENS_AT_ONCE`` a browser): the rate they open at then bounds the steps/s."""
    if not opened:
        return {"open_peak": float("nan"), "open_mean": float("nan")}
    times = sorted(ends)
    lo, hi = (times[len(times) // 10], times[(len(times) * 9) // 10]) if len(times) >= 10 else (0.0, math.inf)
    inside = [count for when, count in opened if lo <= when <= hi] or [count for _, count in opened]
    return {"open_peak": float(max(count for _, count in opened)), "open_mean": sum(inside) / len(inside)}


def soak_script(plans: list[list[Act]], latency: float) -> dict[str, Any]:
    answer = {"action": "answer", "content": ANSWER}
    tasks = []
    for i, plan in enumerate(plans):
        rules: list[dict[str, Any]] = [{"when": {"final": True}, "action": answer}]
        rules += [
            {"when": {"step": k}, "thought": f"step {k}: {act[0]} {act[1]}", "action": policy_action(act, i)}
            for k, act in enumerate(plan, start=1)
        ]
        rules.append({"thought": "all done", "action": answer})
        tasks.append({"id": f"soak-{i:04d}", "match": task_tag(i), "policy": rules, "validator": {"accept": [ANSWER]}})
    return {
        "latency_s": latency,
        "viewport": {"width": VIEWPORT[0], "height": VIEWPORT[1]},
        "localizer_profile": DEFAULT_PROFILE,
        "elements": {name: list(point) for name, point in ELEMENTS.items()},
        "tasks": tasks,
    }


def start_url(origin: str, index: int, slow_ms: int) -> str:
    return f"{origin}/p?t=s{index:04d}&n=0&ms={slow_ms}"


# -- what the agent recorded ------------------------------------------------------------------------
#: Counters read from each trajectory step: name -> test on one recovery line (or, for trajectories
#: without a ``recoveries`` field, one event line). Adjust here when the agent's wording changes.
RECOVERY_KINDS: dict[str, Callable[[str], bool]] = {
    "captures_resent": lambda t: "navigation committed" in t.lower(),
    "captures_recovered": lambda t: (
        "screenshot did not come" in t.lower()
        and any(w in t.lower() for w in ("again", "retaken", "recovered", "new devtools session"))
    ),
    "pages_replaced": lambda t: any(w in t.lower() for w in ("reopened", "replaced")),
}
#: Counters read from every step's events.
EVENT_KINDS: dict[str, Callable[[str], bool]] = {
    "loads_capped": lambda t: "still loading" in t,
    "tabs_followed": lambda t: "new tab opened" in t.lower(),
    "crashes": lambda t: "crash" in t.lower(),
}


def trajectory_counts(out: Path) -> dict[str, int]:
    counts = collections.Counter({k: 0 for k in (*RECOVERY_KINDS, *EVENT_KINDS, "failed_steps")})
    failures: collections.Counter[str] = collections.Counter()
    for path in out.glob("runs/*/attempt-*/trajectory.jsonl"):
        for line in path.read_text(encoding="utf-8").split("\n"):
            if not line.strip():
                continue
            try:
                step = json.loads(line)
            except ValueError:
                continue
            events = [str(e) for e in step.get("events", [])]
            lines = [str(r) for r in step["recoveries"]] if "recoveries" in step else events
            for name, test in RECOVERY_KINDS.items():
                counts[name] += sum(test(t) for t in lines)
            for name, test in EVENT_KINDS.items():
                counts[name] += sum(test(t) for t in events)
            outcome = str(step.get("outcome") or "")
            if outcome.startswith("failed") or step.get("error"):
                counts["failed_steps"] += 1
                failures[(step.get("error") or outcome)[:90]] += 1
    result: dict[str, Any] = dict(counts)
    result["top_failures"] = failures.most_common(3)
    return result


def last_steps(out: Path, ids: set[str]) -> list[str]:
    """For tasks with no result line: how many steps they recorded and the last one."""
    lines = []
    for task in sorted(ids):
        path = out / "runs" / task / "attempt-1" / "trajectory.jsonl"
        steps = [ln for ln in path.read_text().split("\n") if ln.strip()] if path.exists() else []
        if not steps:
            lines.append(f"{task}: no step recorded")
            continue
        last = json.loads(steps[-1])
        action = last.get("action") or {}
        lines.append(
            f"{task}: {len(steps)} steps recorded; the last: {action.get('action')} {action.get('element') or ''} "
            f"at {last.get('url')} -> {str(last.get('outcome'))[:80]}; the next step never ended"
        )
    return lines


# -- hangs: where the stuck tasks wait ----------------------------------------------------------------
def async_stack(task: asyncio.Task[Any]) -> list[str]:
    """The await chain of a task, outermost first (``Task.get_stack`` gives only the outer frame):
    through coroutines, async generators (``asend`` objects, found with ``gc.get_referents``) and
    awaited tasks, down to the future it waits on."""
    out: list[str] = []
    obj: Any = task.get_coro()
    for _ in range(200):
        if obj is None:
            break
        kind = type(obj).__name__
        if kind in ("async_generator_asend", "async_generator_athrow"):
            obj = next((r for r in gc.get_referents(obj) if inspect.isasyncgen(r)), None)
            continue
        if kind == "FutureIter":
            obj = next((r for r in gc.get_referents(obj) if isinstance(r, asyncio.Future)), None)
            continue
        if isinstance(obj, asyncio.Task):
            out.append(f"<task {obj.get_name()}>")
            obj = obj.get_coro()
            continue
        if isinstance(obj, asyncio.Future):
            out.append(f"<{kind} {'done' if obj.done() else 'pending'}>")
            break
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None) or getattr(obj, "gi_frame", None)
        if frame is None:
            out.append(f"<{kind}>")
            break
        short = frame.f_code.co_filename.split("site-packages/")[-1].split("/work/main/")[-1]
        out.append(f"{short}:{frame.f_lineno} {frame.f_code.co_name}")
        obj = getattr(obj, "cr_await", None) or getattr(obj, "ag_await", None) or getattr(obj, "gi_yieldfrom", None)
    return out


def dump_tasks(path: Path, mine: Callable[[str, list[str]], bool]) -> list[tuple[str, int]]:
    """Write every asyncio task's await chain to ``path``; the most common innermost waits (the last
    three frames, innermost first) of the tasks ``mine(name, stack)`` picks."""
    stacks = [(t.get_name(), async_stack(t)) for t in asyncio.all_tasks() if not t.done()]
    with path.open("w") as fh:
        for name, stack in stacks:
            fh.write(f"--- {name}\n" + "".join(f"    {s}\n" for s in stack))
    where = collections.Counter(" <- ".join(reversed(s[-3:])) for name, s in stacks if mine(name, s))
    return where.most_common(5)


async def wait_phase(
    tasks: set[asyncio.Task[Any]], deadline_s: float, stall_s: float, last_progress: Callable[[], float]
) -> str:
    """Wait for ``tasks``: "done", or "deadline" (``deadline_s`` passed) or "stall" (no step finished
    anywhere for ``stall_s``: the sessions left are stuck, however long the deadline still is)."""
    end = time.monotonic() + deadline_s
    while True:
        _, pending = await asyncio.wait(tasks, timeout=min(5.0, max(0.0, end - time.monotonic())))
        if not pending:
            return "done"
        now = time.monotonic()
        if now >= end:
            return "deadline"
        if now - last_progress() > stall_s:
            return "stall"


def report_stuck(side: str, why: str, dump: Path, stuck: list[tuple[str, int]]) -> None:
    print(f"  {side}: {why}; asyncio task dump in {dump}; where the stuck tasks wait (innermost first):", flush=True)
    for where, count in stuck:
        print(f"    {count} x {where}", flush=True)


class Watchdog:
    """Ends the process (thread dump to stderr, the processes this script started killed) once
    ``seconds`` have passed: a phase's deadline plus a grace for its clean-up, which did not come back
    (or the event loop itself is blocked)."""

    def __init__(self, seconds: float, what: str, children: list[subprocess.Popen[str]]) -> None:
        self._timer = threading.Timer(seconds, self._fire, (what, children))
        self._timer.daemon = True

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    @staticmethod
    def _fire(what: str, children: list[subprocess.Popen[str]]) -> None:
        print(f"\nWATCHDOG: {what} did not end; thread dump follows, then exit", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(all_threads=True)
        kill_descendants()
        for child in children:
            with contextlib.suppress(OSError):
                child.kill()
        os._exit(3)


def kill_descendants() -> None:
    """SIGKILL every process under this one (Chromium, the Playwright drivers, the servers and the
    monitor: all started by this script), by pid."""
    me = os.getpid()
    for pid in process_tree(me, set()):
        if pid != me:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# -- the floor ----------------------------------------------------------------------------------------
class FloorSession:
    """One bare session: a context, its current page and CDP session, and the scroll offsets."""

    def __init__(self, browser: Any, frame: Any, config: BrowserConfig, counts: collections.Counter[str]) -> None:
        self.browser, self.frame, self.config, self.counts = browser, frame, config, counts
        self.scroll = (0.0, 0.0)
        self.last = "the start page"  # the action before the next screenshot
        #: Tabs that opened after the wait for them was over (a loaded machine): followed after the
        #: next action, as the agent's TabFollower does, so the floor renders every page the agent does.
        self.late: list[Any] = []

    def _on_page(self, page: Any) -> None:
        self.late.append(page)

    def _own(self, page: Any) -> Any:
        """``page``, opened by the session itself (not a tab the site opened)."""
        self.late = [p for p in self.late if p is not page]
        return page

    async def open(self, url: str) -> None:
        self.context = await self.browser.new_context(
            viewport={"width": VIEWPORT[0], "height": VIEWPORT[1]}, device_scale_factor=1
        )
        self.context.on("page", self._on_page)
        self.page = self._own(await self.context.new_page())
        try:
            await self.page.goto(url, wait_until="load", timeout=30_000)
        except PlaywrightError:
            self.counts["loads_capped"] += 1
        self.cdp = await self.context.new_cdp_session(self.page)

    def _params(self) -> dict[str, Any]:
        return {
            "format": "jpeg",
            "quality": self.config.jpeg_quality,
            "optimizeForSpeed": True,
            "clip": {
                "x": self.scroll[0],
                "y": self.scroll[1],
                "width": self.frame.css_width,
                "height": self.frame.css_height,
                "scale": self.frame.scale,
            },
        }

    async def shoot(self) -> None:
        """Page.captureScreenshot at the model's size (what the agent sends), recovered like the agent
        does: retried on a frame not ready yet; when it does not come within the agent's capture
        timeout, taken again on a new CDP session, and if that does not come either, the page is
        reopened in a new tab (its timed-out captures go with the old one) and shot once more."""
        timeouts = 0
        for attempt in range(4):
            try:
                async with asyncio.timeout(CAPTURE_S):
                    await self._capture()
                if timeouts:
                    self.counts["capture_retaken" if timeouts == 1 else "capture_after_reopen"] += 1
                return
            except TimeoutError:
                timeouts += 1
                self.counts["capture_timeouts"] += 1
                self.counts[f"{AFTER}{self.last}"] += 1
                if timeouts == 3:
                    break
                with contextlib.suppress(PlaywrightError, TimeoutError):
                    if timeouts == 2:
                        async with asyncio.timeout(NAVIGATION_S + COMMAND_S):
                            await self._reopen()
                    async with asyncio.timeout(COMMAND_S):
                        self.cdp = await self.context.new_cdp_session(self.page)
            except PlaywrightError:
                if attempt == 3:
                    break
                with contextlib.suppress(PlaywrightError, TimeoutError):
                    async with asyncio.timeout(0.5):
                        await self.page.evaluate(TWO_FRAMES)
        self.counts["captures_failed"] += 1

    async def _capture(self) -> None:
        """One capture, sent again when the main frame commits while it waits: Chromium never answers
        such a capture (docs/faults.md), and a bare loop that knows it does what the agent does."""
        page = self.page
        for _ in range(4):
            committed = asyncio.Event()

            def on_navigated(frame: Any, page: Any = page, committed: asyncio.Event = committed) -> None:
                if frame == page.main_frame:
                    committed.set()

            page.on("framenavigated", on_navigated)
            capture = asyncio.ensure_future(self.cdp.send("Page.captureScreenshot", self._params()))
            commit = asyncio.ensure_future(committed.wait())
            try:
                await asyncio.wait({capture, commit}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                page.remove_listener("framenavigated", on_navigated)
                commit.cancel()
                if not capture.done():
                    capture.cancel()
            if capture.done() and not capture.cancelled():
                capture.result()  # raises its PlaywrightError
                return
            self.counts["capture_resent"] += 1
            with contextlib.suppress(asyncio.CancelledError, PlaywrightError):
                await capture

    async def _reopen(self) -> None:
        """The agent's last resort: a new tab at the page's URL in place of the page (closed)."""
        self.counts["pages_replaced"] += 1
        old, url = self.page, self.page.url
        self.page = self._own(await self.context.new_page())
        self.scroll = (0.0, 0.0)
        with contextlib.suppress(PlaywrightError, TimeoutError):
            async with asyncio.timeout(COMMAND_S):
                await old.close()
        try:
            await self.page.goto(url, wait_until="load", timeout=NAVIGATION_S * 1000)
        except PlaywrightError:
            self.counts["loads_capped"] += 1

    async def view(self, after_frame: bool) -> None:
        """The scroll offsets, read like the agent's settle does (one Runtime.evaluate, capped at 0.5 s)."""
        expression = VIEW_AFTER_FRAME if after_frame else VIEW_NOW
        try:
            async with asyncio.timeout(0.5):
                reply = await self.cdp.send(
                    "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
                )
            x, y, *_ = reply["result"]["value"]
            self.scroll = (float(x), float(y))
        except (PlaywrightError, TimeoutError, KeyError, TypeError, ValueError):
            self.scroll = (0.0, 0.0)

    async def _navigating(self, action: Any) -> None:
        """Run ``action`` and wait for the navigation it starts and its load, capped like the agent's settle."""
        try:
            async with self.page.expect_navigation(wait_until="load", timeout=SETTLE_S * 1000):
                await action()
        except PlaywrightError:  # timeouts included: a slow page, a page that never fires load
            self.counts["loads_capped"] += 1

    async def act(self, act: Act, index: int) -> None:
        kind, arg = act
        page = self.page
        if kind == "click" and arg == "new tab link":
            deadline = time.monotonic() + SETTLE_S
            try:
                async with self.context.expect_page(timeout=SETTLE_S * 1000) as info:
                    await page.mouse.click(*ELEMENTS[arg])
                await info.value
            except PlaywrightError:
                self.counts["tabs_late"] += 1  # followed after the next action, if it ever opens
            else:
                await self._follow(deadline)
        elif kind == "click":
            await self._navigating(lambda: page.mouse.click(*ELEMENTS[arg]))
        elif kind == "write":
            await page.mouse.click(*ELEMENTS[arg])
            await page.keyboard.press("ControlOrMeta+A")
            await page.keyboard.type(f"soak {index}")
            await self._navigating(lambda: page.keyboard.press("Enter"))
        elif kind == "scroll":
            w, h = VIEWPORT
            await page.mouse.move(w / 2, h / 2)
            await page.mouse.wheel(0, 0.8 * h)
        elif kind == "back":
            try:
                await page.go_back(wait_until="load", timeout=SETTLE_S * 1000)
            except PlaywrightError:
                self.counts["loads_capped"] += 1
        if self.late and not (kind == "click" and arg == "new tab link"):
            await self._follow(time.monotonic() + SETTLE_S)  # a tab that opened late: followed now
        await self.view(after_frame=kind == "scroll")

    async def _follow(self, deadline: float) -> None:
        """Move to the newest tab the page opened (its load awaited up to ``deadline``)."""
        if not self.late:
            return
        new, self.late = self.late[-1], []
        if new.is_closed():
            return
        with contextlib.suppress(PlaywrightError):
            await new.wait_for_load_state("load", timeout=max(1.0, (deadline - time.monotonic()) * 1000))
        with contextlib.suppress(PlaywrightError):
            await new.bring_to_front()
        self.page = new
        self.cdp = await self.context.new_cdp_session(new)
        self.counts["tabs_followed"] += 1


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


# -- the agent ----------------------------------------------------------------------------------------
async def agent(
    plans: list[list[Act]],
    urls: list[str],
    latency: float,
    workdir: Path,
    exclude: set[int],
    limits: tuple[float, float],
    children: list[subprocess.Popen[str]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    command_timeout_s, kill, guard = args.command_timeout, args.kill, args.guard
    deadline_s = limits[0]
    n, steps = len(plans), len(plans[0]) + 1
    server = OfflineServer(soak_script(plans, latency), workdir)
    children.append(server.proc)
    try:
        tasks_file = workdir / "tasks.jsonl"
        tasks_file.write_text(
            "".join(
                json.dumps(
                    {"id": f"soak-{i:04d}", "url": urls[i], "goal": f"{task_tag(i)} Browse the soak site, then answer."}
                )
                + "\n"
                for i in range(n)
            )
        )
        # The run's own time limit out of reach: a session stuck anywhere shows as hung, not as max_time.
        config = offline_config(
            server.url, DEFAULT_PROFILE, max_steps=steps + 2, max_time_s=max(3600.0, 2 * deadline_s)
        )
        config.browser.contexts_per_browser = max(math.ceil(n / max(args.browsers, 1)), 1)
        config.browser.recycle_after = 10_000
        config.browser.args = [RESOLVER_RULE]
        config.browser.executable_path = args.executable
        if command_timeout_s:
            config.browser.command_timeout_s = command_timeout_s
        if guard == "allow":  # every request judged, the allow-list's proxy net, hardened browsers
            config.browser.allowed_domains = ["127.0.0.1", "localhost"]
        for role in ("policy", "localizer", "validator"):
            config.role(role).timeout_s = 120
        out = workdir / "batch"
        ends: list[float] = []
        seen = [0]
        started = time.monotonic()

        def on_update(stats: Any) -> None:  # called after every step (and every finished task)
            if stats.steps > seen[0]:
                ends.extend([time.monotonic()] * (stats.steps - seen[0]))
                seen[0] = stats.steps

        workers = auto_workers(n) if args.workers == "auto" else int(args.workers)
        runner = BatchRunner(
            config,
            load_tasks(tasks_file, trusted=True),  # the benchmark's own tasks
            out,
            concurrency=n,
            on_update=on_update,
            admission=not args.no_admission,
            workers=workers,
        )
        server_cpu = cpu_s(server.proc.pid)
        stuck: list[tuple[str, int]] = []
        abandoned = False
        opened: list[tuple[float, int]] = []  # (time, sessions open in the agent's browser pool)

        async def count_open() -> None:
            while True:
                if runner.agent is not None or runner.processes is not None:
                    opened.append((time.monotonic(), runner.open_sessions))
                await asyncio.sleep(0.5)

        with Meter(exclude | {server.proc.pid}) as meter:
            counter = asyncio.create_task(count_open(), name="count-open")
            run = asyncio.create_task(runner.run(), name="batch")
            killer = (
                asyncio.create_task(
                    kill_chromium(kill, exclude | {server.proc.pid}, lambda: runner.stats.steps, args.seed),
                    name="kill",
                )
                if kill
                else None
            )
            freezer = (
                asyncio.create_task(freeze_chromium(args, exclude | {server.proc.pid}), name="freeze")
                if args.freeze
                else None
            )
            why = await wait_phase({run}, *limits, lambda: ends[-1] if ends else started)
            if why != "done":
                dump = workdir / "agent-tasks.txt"
                stuck = dump_tasks(dump, lambda _, stack: any("webagent/" in f for f in stack))
                report_stuck("agent", f"{why}: {runner.stats.in_flight} tasks in flight", dump, stuck)
                runner.stop()  # abandons the tasks in flight: no result line
                done, _ = await asyncio.wait({run}, timeout=60)
                if not done:
                    run.cancel()
                    done, _ = await asyncio.wait({run}, timeout=30)
                    abandoned = not done
            stats = runner.stats
            killed = await _killed(killer)
            frozen = await _thawed(freezer)
            counter.cancel()
        server_cpu = cpu_s(server.proc.pid) - server_cpu
        server_timings = server.stats().get("timings", {})
    finally:
        server.stop()
    results = read_results(out)
    reasons = collections.Counter(r.stop_reason for r in results)
    hung_at = last_steps(out, {f"soak-{i:04d}" for i in range(n)} - {r.id for r in results})
    for line in hung_at[:10]:
        print(f"  hung: {line}", flush=True)
    totals = [t for t in stats.step_total_s if t > 0]
    rate, cpu, split = steady(ends, meter) if len(ends) >= 10 else (float("nan"), float("nan"), {})
    return {
        "sessions": n,
        "workers": workers,
        "finished": len(results),
        "succeeded": sum(r.success for r in results),
        "hung": n - len(results),
        "retried": sum(r.retried for r in results),
        "killed": killed,
        "frozen": frozen,
        "errors": sum(r.stop_reason == "error" for r in results),
        "infra_errors": sum(r.infrastructure for r in results),
        "infra_reruns": sum(r.infra_reruns for r in results),
        "rerun_reasons": dict(
            collections.Counter(x.reason for r in results for a in r.attempt_records for x in a.reruns)
        ),
        "infra_causes": collections.Counter(
            infra_cause(x.message)
            for r in results
            for a in r.attempt_records
            for x in a.reruns
            if x.reason == "infrastructure"
        ).most_common(3),
        "admission": summarize_admission(stats),
        "model_calls": model_call_times(results, server_timings),
        "commands": dict(stats.commands),
        "abandoned": abandoned,
        "stop_reasons": dict(reasons),
        "top_errors": collections.Counter(r.message[:120] for r in results if r.stop_reason == "error").most_common(3),
        "steps": stats.steps,
        "steps_per_s": rate,
        "cpu_per_step_ms": cpu,
        "split": {**split, "model server (not counted)": round(server_cpu / max(stats.steps, 1) * 1000, 1)},
        "pss_mib": meter.peak_kib / 1024 / max(n, 1),
        **pss_per_open_session(meter.pss, opened),
        **open_sessions(opened, ends),
        "step_p50_s": percentile(totals, 0.5),
        "step_p90_s": percentile(totals, 0.9),
        "counts": trajectory_counts(out),
        "stuck": stuck,
        "hung_at": hung_at,
        "out": str(out),
    }


def model_call_times(results: list[Any], server: dict[str, Any]) -> dict[str, Any]:
    """A model call's mean seconds as the agent saw it, by role, beside the offline server's own
    split of it (the body read and reply prepared before its scripted wait, its lateness after):
    what a call costs past ``--latency``, and which side of the wire it is on."""
    times: dict[str, Any] = {}
    for role in ("policy", "localizer", "validator"):
        usages = [r.usage.role(role) for r in results]
        calls = sum(u.calls for u in usages)
        if calls:
            times[f"{role} mean s"] = round(sum(u.latency_s for u in usages) / calls, 3)
    for name, q in server.items():
        times[f"server {name.removesuffix('_s')} mean / p90 s"] = f"{q['mean']:.3f} / {q['p90']:.3f}"
    return times


def chromium_pids(kind: str, exclude: set[int]) -> list[int]:
    """This process's Chromium processes of a kind (``_kind``'s names); python children are not Chromium."""
    me, tree = os.getpid(), _children()
    pids = [p for p in process_tree(me, exclude) if p != me and _kind(p, me) == kind]
    if kind == "chromium browser":  # the main process: the one with typed children (not crashpad's handler)
        pids = [p for p in pids if any(_kind(c, me).startswith("chromium ") for c in tree.get(p, []))]
    return pids


async def kill_chromium(kind: str, exclude: set[int], steps: Callable[[], int], seed: int = 0) -> list[str]:
    """``kill -9`` of Chromium processes of this run: ``browser`` its main process at 30 s,
    ``renderers`` four renderer processes at 12, 15, 18 and 20 s (as in the reliability issue),
    ``setup`` four renderers while the sessions are being set up (issue 43): one every 0.25 s from
    the first renderer on, while no step has ended (``steps()``: the steps ended so far)."""
    if kind == "setup":
        return await kill_in_set_up(exclude, steps, seed)
    started, killed = time.monotonic(), list[str]()
    plan = (
        [(30.0, "chromium browser")]
        if kind == "browser"
        else [(t, "chromium renderer") for t in (12.0, 15.0, 18.0, 20.0)]
    )
    for at, target in plan:
        await asyncio.sleep(max(0.0, started + at - time.monotonic()))
        pids = chromium_pids(target, exclude)
        if pids:
            victim = random.Random(len(killed)).choice(pids)
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
            killed.append(f"{target} {victim} at {time.monotonic() - started:.0f} s")
            print(f"  killed {killed[-1]}", flush=True)
    return killed


async def kill_in_set_up(exclude: set[int], steps: Callable[[], int], seed: int, kills: int = 4) -> list[str]:
    """Renderers killed while the sessions open: their contexts opened, their guards installed, their
    start pages loading (the crash before the first step that issue 43 saw end three tasks)."""
    started, killed, draw = time.monotonic(), list[str](), random.Random(seed)
    while len(killed) < kills and steps() == 0:
        pids = chromium_pids("chromium renderer", exclude)
        if pids:
            victim = draw.choice(pids)
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
            killed.append(f"renderer {victim} at {time.monotonic() - started:.1f} s ({len(pids)} renderers, 0 steps)")
            print(f"  killed {killed[-1]}", flush=True)
        await asyncio.sleep(0.25)
    return killed


async def _killed(killer: asyncio.Task[list[str]] | None) -> list[str]:
    if killer is None:
        return []
    if not killer.done():
        killer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        return await killer
    return []


async def freeze_chromium(args: argparse.Namespace, exclude: set[int]) -> list[str]:
    """SIGSTOP one Chromium main process of this run at ``--freeze-at`` s; SIGCONT it ``--freeze-for``
    s later (``--freeze resume``), or never (``never``: it is killed when the phase ends)."""
    started, events = time.monotonic(), list[str]()
    await asyncio.sleep(args.freeze_at)
    pids = chromium_pids("chromium browser", exclude)
    if not pids:
        return ["no Chromium to freeze"]
    victim = random.Random(args.seed).choice(pids)
    try:
        os.kill(victim, signal.SIGSTOP)
        events.append(f"SIGSTOP {victim} at {time.monotonic() - started:.0f} s")
        print(f"  froze chromium {victim} ({args.freeze})", flush=True)
        if args.freeze == "never":
            await asyncio.Event().wait()  # until the phase ends (cancelled)
        await asyncio.sleep(args.freeze_for)
        os.kill(victim, signal.SIGCONT)
        events.append(f"SIGCONT {victim} at {time.monotonic() - started:.0f} s")
        print(f"  resumed chromium {victim}", flush=True)
    except ProcessLookupError:
        events.append(f"{victim} gone")
    except asyncio.CancelledError:  # the phase ended: a frozen browser never resumed is killed
        if args.freeze == "never":
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
            events.append(f"never resumed; SIGKILL {victim} after the batch, at {time.monotonic() - started:.0f} s")
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGCONT)
    return events


async def _thawed(freezer: asyncio.Task[list[str]] | None) -> list[str]:
    if freezer is None:
        return []
    if not freezer.done():
        freezer.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        return await freezer
    return []


def summarize_admission(stats: BatchStats) -> dict[str, Any]:
    a = stats.admission
    if a is None:
        return {}
    return {
        "peak_running": a.peak_running,
        "limit": f"{a.lowest}-{a.highest} of {a.ceiling}",
        "decreases": a.decreases,
        "held_back_s": a.held_back_s,
    }


def start_hogs(n: int, children: list[subprocess.Popen[str]]) -> list[int]:
    """``n`` busy processes at normal priority (the machine other work keeps busy); their pids."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], text=True) for _ in range(n)]
    children.extend(hogs)
    return [h.pid for h in hogs]


# -- running it ---------------------------------------------------------------------------------------
def site_stats(origin: str, reset_peak: bool = False) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(origin + "/_stats" + ("?reset_peak=1" if reset_peak else ""), timeout=10) as reply:
            return dict(json.load(reply))
    except (OSError, ValueError):
        return {}


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


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    keep = ("hangs_open", "hangs_open_peak")
    return {k: v if k in keep else v - before.get(k, 0) for k, v in after.items()}


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else float("nan")


def print_row(row: dict[str, Any]) -> None:
    n, f, a = row["n"], row.get("floor"), row.get("agent")
    if f:
        print(
            f"N={n:<4} floor: {f['finished']}/{n} sessions finished, {f['hung']} hung, {f['steps']} steps, "
            f"{f['steps_per_s']:.1f} steps/s, CPU/step {f['cpu_per_step_ms']:.0f} ms, PSS/session "
            f"{f['pss_mib']:.0f} MiB, open at once {f['open_mean']:.0f} (peak {f['open_peak']:.0f}), step p50 "
            f"{f['step_p50_s']:.2f} s p90 {f['step_p90_s']:.2f} s\n"
            f"       counts {f['counts']}  capture timeouts after {f['capture_timeouts_after']}  "
            f"failures {f['top_failures']}\n"
            f"       CPU ms/step by process {f['split']}\n       site {f['site']}",
            flush=True,
        )
    if a:
        errors = f" (errors: {a['top_errors']})" if a["top_errors"] else ""
        print(
            f"N={n:<4} agent ({a.get('workers', 1)} worker processes): {a['finished']}/{n} tasks finished ({a['succeeded']} succeeded), {a['hung']} hung, "
            f"stop reasons {a['stop_reasons']}{errors}, {a['steps']} steps, {a['steps_per_s']:.1f} steps/s, CPU/step "
            f"{a['cpu_per_step_ms']:.0f} ms, PSS/session {a['pss_mib']:.0f} MiB (per open session "
            f"{a['pss_per_open_mib']:.0f} MiB at the PSS peak, {a['pss_at_open_peak_mib']:.0f} MiB with "
            f"{a['open_peak']:.0f} open; open at once {a['open_mean']:.0f}), step p50 {a['step_p50_s']:.2f} s "
            f"p90 {a['step_p90_s']:.2f} s, {a['retried']} re-run\n       counts {a['counts']}\n"
            + (f"       killed {a['killed']}\n" if a["killed"] else "")
            + (f"       frozen {a['frozen']}\n" if a["frozen"] else "")
            + f"       errors {a['errors']} (infrastructure {a['infra_errors']}), re-runs {a['rerun_reasons']}, "
            f"infrastructure re-runs {a['infra_reruns']} {a['infra_causes']}\n"
            f"       admission {a['admission']}, browser commands {a['commands']}\n"
            f"       model calls {a['model_calls']}\n"
            + f"       CPU ms/step by process {a['split']}\n       site {a['site']}",
            flush=True,
        )
    if f and a:
        print(
            f"N={n:<4} agent/floor steps/s {_ratio(a['steps_per_s'], f['steps_per_s']):.2f}, "
            f"CPU/step {_ratio(a['cpu_per_step_ms'], f['cpu_per_step_ms']):.2f}",
            flush=True,
        )


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median agent/floor steps/s (hung and unfinished counts: the worst round's)."""

    def key(r: dict[str, Any]) -> float:
        if "floor" in r and "agent" in r:
            value = _ratio(r["agent"]["steps_per_s"], r["floor"]["steps_per_s"])
        else:
            value = r.get("agent", r.get("floor", {})).get("steps_per_s", 0.0)
        return -1.0 if math.isnan(value) else value

    row = sorted(rounds, key=key)[len(rounds) // 2]
    for side in ("floor", "agent"):
        if side in row:
            row = {
                **row,
                side: {
                    **row[side],
                    "hung": max(r[side]["hung"] for r in rounds),
                    "finished": min(r[side]["finished"] for r in rounds),
                },
            }
    return row


def warnings(row: dict[str, Any]) -> list[str]:
    """What makes a row's figures suspect: a floor that failed its screenshots (overloaded: its steps/s
    is then no floor), sessions hung, agent tasks that did not succeed."""
    out = []
    n, f, a = row["n"], row.get("floor") or {}, row.get("agent") or {}
    failed = f.get("counts", {}).get("captures_failed", 0)
    if f and failed > 0.05 * max(f["steps"], 1):
        out.append(
            f"N={n}: the floor got no screenshot at {failed} of {f['steps']} steps (not even after a retry and "
            "a reopened page): "
            "the browser is overloaded and the floor's steps/s is no floor"
        )
    for side, d in (("agent", a), ("floor", f)):
        if d.get("hung"):
            out.append(f"N={n}: {d['hung']} {side} sessions hung")
    if a and a.get("succeeded", 0) < n:
        out.append(f"N={n}: {n - a.get('succeeded', 0)} agent tasks did not succeed: {a.get('stop_reasons')}")
    return out


def _plain(value: Any) -> Any:
    """JSON-ready: NaN as null, tuples as lists."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    print()
    print(
        f"soak: model latency {args.latency:g} s per call, {args.steps} steps per task (slow page and never-answering "
        f"request in every task), profile {DEFAULT_PROFILE} (1260x784 JPEG), median of {args.repeat} round(s) per N"
        + (f", {args.hog} busy processes beside both phases (--hog)" if args.hog else "")
        + (", admission control off" if args.no_admission else "")
    )
    print()
    print(
        "| N | tasks finished | sessions hung (agent / floor) | captures resent / recovered | pages replaced "
        "| floor steps/s | agent steps/s | agent/floor | CPU/step floor | CPU/step agent | agent/floor CPU "
        "| PSS/session floor | PSS/session agent | agent sessions open at peak | PSS/open session agent "
        "| step p50 / p90 floor | step p50 / p90 agent |"
    )
    print("|---" * 17 + "|")
    nan = float("nan")
    for row in rows:
        f = row.get("floor") or {}
        a = row.get("agent") or {}
        ac = a.get("counts", {})
        print(
            f"| {row['n']} | {a.get('finished', '-')}/{row['n']} ({a.get('succeeded', '-')} succeeded) "
            f"| {a.get('hung', '-')} / {f.get('hung', '-')} "
            f"| {ac.get('captures_resent', '-')} / {ac.get('captures_recovered', '-')} "
            f"| {ac.get('pages_replaced', '-')} | {f.get('steps_per_s', nan):.1f} | {a.get('steps_per_s', nan):.1f} "
            f"| {_ratio(a.get('steps_per_s', nan), f.get('steps_per_s', nan)):.2f} "
            f"| {f.get('cpu_per_step_ms', nan):.0f} ms | {a.get('cpu_per_step_ms', nan):.0f} ms "
            f"| {_ratio(a.get('cpu_per_step_ms', nan), f.get('cpu_per_step_ms', nan)):.2f} "
            f"| {f.get('pss_mib', nan):.0f} MiB | {a.get('pss_mib', nan):.0f} MiB "
            f"| {a.get('open_peak', nan):.0f} | {a.get('pss_per_open_mib', nan):.0f} MiB "
            f"| {f.get('step_p50_s', nan):.2f} / {f.get('step_p90_s', nan):.2f} s "
            f"| {a.get('step_p50_s', nan):.2f} / {a.get('step_p90_s', nan):.2f} s |"
        )
    notes = [w for row in rows for w in warnings(row)]
    if notes:
        print()
        for note in notes:
            print(f"WARNING {note}")


def start_site(children: list[subprocess.Popen[str]]) -> tuple[subprocess.Popen[str], list[str]]:
    site = subprocess.Popen(
        [sys.executable, str(SITE), "--stdin-eof"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    children.append(site)
    assert site.stdout is not None
    line = site.stdout.readline().strip()
    if not line.startswith(READY_PREFIX):
        site.kill()
        raise SystemExit(f"the soak site did not start: {line!r}")
    return site, line.removeprefix(READY_PREFIX).split()


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
