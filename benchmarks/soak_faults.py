"""The faults the soak puts the agent through: Chromium processes killed or frozen, a busy machine.

``kill_chromium`` (``--kill``) kills the browser's main process, renderers one after the other, or
renderers while the sessions are set up; ``freeze_chromium`` (``--freeze``) stops a Chromium main
process and lets it go on later, or never; ``fault_events`` is what such a task did, once the phase
is over. ``start_hogs`` (``--hog``) starts the busy processes run beside both phases.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from procmeter import _children, _kind, process_tree

__all__ = ["chromium_pids", "fault_events", "freeze_chromium", "kill_chromium", "kill_in_set_up", "start_hogs"]


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


async def fault_events(task: asyncio.Task[list[str]] | None) -> list[str]:
    """What a ``kill_chromium`` or ``freeze_chromium`` task did, cancelling it if it still runs."""
    if task is None:
        return []
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        return await task
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


def start_hogs(n: int, children: list[subprocess.Popen[str]]) -> list[int]:
    """``n`` busy processes at normal priority (the machine other work keeps busy); their pids."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], text=True) for _ in range(n)]
    children.extend(hogs)
    return [h.pid for h in hogs]
