"""Where Chromium's threads spend a step, by task: a trace of the browser (category ``toplevel``) for a
few seconds in the middle of a phase, summed by thread and by the task's origin in Chromium's source.

``stepcpu.py --chromium-trace S`` uses it: each side's browser is traced for S seconds once a third
of its steps are done (``Tracing.start`` through Playwright's ``Browser.start_tracing``, on every
browser the phase launches), and the thread time (``tdur``) of every top-level task is summed by
the thread it ran on (the browser's UI and IO threads, the display compositor, the renderers' main
threads, MemoryInfra) and labelled by the function and file that posted it (``src_func @ src_file``),
or the Mojo interface whose message it handled. Divided by the span the trace covers and by the
phase's steps/s, that is milliseconds per step by task, side by side: where one side's step costs a
thread more than the other's. Tracing costs both sides some CPU (a few percent); the figures are
for comparison, not absolute.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import Callable
from typing import Any

__all__ = ["THREADS", "BrowserTracer", "per_step", "summarize", "table"]

#: The threads summed: (process name, thread name prefix) -> the row label.
THREADS = {
    ("Browser", "CrBrowserMain"): "browser UI thread",
    ("Browser", "Chrome_IOThread"): "browser IO thread",
    ("Browser", "MemoryInfra"): "browser MemoryInfra",
    ("GPU Process", "VizCompositorThread"): "display compositor",
    ("Renderer", "CrRendererMain"): "renderer main threads",
}


class BrowserTracer:
    """Traces each browser handed to ``watch`` for ``seconds`` once ``ready()`` is true."""

    def __init__(self, seconds: float, ready: Callable[[], bool]) -> None:
        self.seconds = seconds
        self.ready = ready
        self.traces: list[bytes] = []
        self._tasks: list[asyncio.Task[None]] = []

    def watch(self, browser: Any) -> None:
        if self.seconds > 0:
            self._tasks.append(asyncio.get_running_loop().create_task(self._trace(browser)))

    async def _trace(self, browser: Any) -> None:
        while not self.ready():  # noqa: ASYNC110 (a counter, polled)
            await asyncio.sleep(0.5)
        with contextlib.suppress(Exception):  # a browser closed meanwhile: no trace
            await asyncio.wait_for(browser.start_tracing(categories=["toplevel"]), 60)
            await asyncio.sleep(self.seconds)
            self.traces.append(await asyncio.wait_for(browser.stop_tracing(), 300))

    async def close(self) -> None:
        for task in self._tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _label(event: dict[str, Any]) -> str:
    args = event.get("args", {})
    label = str(event["name"])
    if "src_func" in args:
        label = f"{args['src_func']} @ {str(args.get('src_file', '')).rsplit('/', 1)[-1]}"
    tag = args.get("chrome_mojo_event_info", {}).get("watcher_notify_interface_tag")
    return f"{label} [{tag}]" if tag else label


def summarize(trace: bytes) -> tuple[float, dict[str, collections.Counter[str]]]:
    """The span the trace covers (seconds) and, by thread row, thread microseconds by task label
    (top-level tasks only: a task's nested events are in its own time)."""
    data = json.loads(trace)
    events = data["traceEvents"] if isinstance(data, dict) else data
    procs = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    names = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    rows: dict[tuple[int, int], str] = {}
    for key, name in names.items():
        for (proc, prefix), row in THREADS.items():
            if procs.get(key[0]) == proc and name.startswith(prefix):
                rows[key] = row
    complete = [e for e in events if e.get("ph") == "X"]
    if not complete:
        return 0.0, {}
    span = (max(e["ts"] + e["dur"] for e in complete) - min(e["ts"] for e in complete)) / 1e6
    by_thread: dict[tuple[int, int], list[dict[str, Any]]] = collections.defaultdict(list)
    for e in complete:
        if (e["pid"], e["tid"]) in rows and "tdur" in e:
            by_thread[(e["pid"], e["tid"])].append(e)
    out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for key, evs in by_thread.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        end = -1
        for e in evs:
            if e["ts"] >= end:  # not inside the task before
                out[rows[key]][_label(e)] += e["tdur"]
                end = e["ts"] + e["dur"]
    return span, out


def per_step(traces: list[bytes], steps_per_s: float) -> dict[str, dict[str, float]]:
    """Milliseconds per step by thread row and task label, over every trace of a phase."""
    result: dict[str, dict[str, float]] = collections.defaultdict(dict)
    for trace in traces:
        span, rows = summarize(trace)
        steps = span * steps_per_s
        if steps <= 0:
            continue
        for row, labels in rows.items():
            for label, us in labels.items():
                result[row][label] = result[row].get(label, 0.0) + us / 1000 / steps
    return result


def table(floor: dict[str, dict[str, float]], agent: dict[str, dict[str, float]], top: int = 8) -> list[str]:
    """Markdown rows: each thread's ms per step on both sides, then its tasks that differ most."""
    rows = ["| Chromium thread time per step (trace) | floor | agent | agent − floor |", "|---|---|---|---|"]
    for row in THREADS.values():
        f, a = floor.get(row, {}), agent.get(row, {})
        if not f and not a:
            continue
        x, y = sum(f.values()), sum(a.values())
        rows.append(f"| **{row}** | {x:.1f} | {y:.1f} | {y - x:+.1f} |")
        labels = sorted({*f, *a}, key=lambda k: -abs(a.get(k, 0.0) - f.get(k, 0.0)))
        for label in labels[:top]:
            x, y = f.get(label, 0.0), a.get(label, 0.0)
            rows.append(f"| &nbsp; {label[:90]} | {x:.2f} | {y:.2f} | {y - x:+.2f} |")
    return rows
