"""How the soak never hangs, and says where it would have: phase deadlines, task dumps, a watchdog.

``wait_phase`` waits for a phase's sessions up to its deadline, or until no step has ended for the
stall time; ``dump_tasks`` then writes every asyncio task's await chain (``async_stack``: through
coroutines, async generators and awaited tasks) and ``report_stuck`` prints where the stuck ones
wait. ``Watchdog`` ends the process, with a thread dump, if even the clean-up does not come back;
``kill_descendants`` kills what this process started.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import faulthandler
import gc
import inspect
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from procmeter import process_tree

__all__ = ["Watchdog", "async_stack", "dump_tasks", "kill_descendants", "report_stuck", "wait_phase"]


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
