"""The batch's watchdog: a run that makes no progress (no step finished, no model call answered, no
bounded wait over) for ``stall_timeout_s`` is cancelled, where it waited is told, and its files are
kept aside for the re-run. A run still going ``BROWSER_LOST_GRACE_S`` after the browser under it
disconnected is cancelled too, and re-run as after any browser crash.

A run whose directory is set aside (kept or removed) and re-run in the same directory is fenced
first (``fence_run``): what it had begun writing there is done, within ``FENCE_TIMEOUT_S``, and
nothing of it is written there after, even where its clean-up outlasted its bound and still goes
on. Its files stay whole or a prefix where it wrote them; the re-run's directory holds the re-run's."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shutil
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog

from ..files.disk import make_dir, write_atomic
from ..records import RunResult

__all__ = [
    "BROWSER_LOST_GRACE_S",
    "FENCE_TIMEOUT_S",
    "Fenced",
    "Progressing",
    "Stall",
    "cancel_run",
    "fence_run",
    "keep_aside",
    "stuck_in",
    "wait_for_progress",
    "write_result",
]

log = structlog.get_logger("webagent.batch")

#: Seconds a run may go on after the browser under it disconnected before it is cut off and re-run.
BROWSER_LOST_GRACE_S = 10.0
#: Seconds a run set aside gets for the writes into its directory it had begun (its writer thread's
#: jobs queued, a trace being written: as long as a trace's own bound) before its re-run goes on all
#: the same (logged).
FENCE_TIMEOUT_S = 60.0
# How often a run's browser is looked at (a property read, no call): measured at 0.4% of one core
# for 500 runs, against none for a watchdog that sleeps until its limit.
_LOST_POLL_S = 1.0


class Progressing(Protocol):
    """A run that says when it last made progress (``RunStream``), whether it waits its turn to
    open a session (a queue bounded by the deadlines of the opens ahead of it, not a stall), and
    whether the browser under its session disconnected."""

    last_progress: float
    queued: bool

    @property
    def browser_lost(self) -> bool: ...


class Fenced(Protocol):
    """A run whose writes into its directory can be stopped (``RunStream.fence``)."""

    async def fence(self, timeout_s: float) -> bool: ...


@dataclass(frozen=True)
class Stall:
    """Why the watchdog stops a run: no progress for ``idle_s``, or the browser under it is gone
    and the run did not end by itself within the grace it was given (``browser_lost``)."""

    idle_s: float
    browser_lost: bool = False


async def wait_for_progress(
    stream: Progressing, run: asyncio.Task[Any], limit_s: float, *, lost_grace_s: float = BROWSER_LOST_GRACE_S
) -> Stall | None:
    """Wait for the run; a ``Stall`` if it went ``limit_s`` without progress (0: no limit), or if
    it went on ``lost_grace_s`` after the browser under it disconnected. A run whose browser died
    normally fails at once (its calls are refused) and is re-run; one that still waits on something
    the dead browser will never answer is cut off here instead of at its own, longer deadlines."""
    lost_at: float | None = None
    while True:
        now = time.monotonic()
        if lost_at is None and stream.browser_lost:
            lost_at = now
        if lost_at is not None and now - lost_at >= lost_grace_s:
            return Stall(now - stream.last_progress, browser_lost=True)
        wait_s = lost_at + lost_grace_s - now if lost_at is not None else _LOST_POLL_S
        if limit_s > 0 and not stream.queued:  # a queued run's clock starts when it gets its turn
            idle = now - stream.last_progress
            if idle >= limit_s:
                return Stall(idle)
            wait_s = min(wait_s, limit_s - idle)
        done, _ = await asyncio.wait({run}, timeout=wait_s)
        if done:
            return None


async def cancel_run(run: asyncio.Task[Any], name: str, cleanup_s: float, left_behind: set[asyncio.Task[Any]]) -> None:
    """Cancel a run and wait for its cleanup (closing its browser context), a bounded time: a
    cleanup that hangs is cancelled once more, then left behind (added to ``left_behind`` until it ends)."""
    for _ in range(2):
        if run.done():
            break
        run.cancel()
        await asyncio.wait({run}, timeout=cleanup_s)
    if not run.done():
        log.error("run_cleanup_left_behind", task=name, timeout_s=cleanup_s)
        left_behind.add(run)
        run.add_done_callback(left_behind.discard)
    elif not run.cancelled():
        run.exception()  # retrieved: an error while it was being cancelled is not this task's outcome


async def fence_run(stream: Fenced, name: str, directory: Path) -> None:
    """Fence a run before its directory is set aside or re-run: awaited (the loop goes on), bounded
    by ``FENCE_TIMEOUT_S``; a fence that expires is logged, and the batch goes on."""
    timeout_s = FENCE_TIMEOUT_S
    if not await stream.fence(timeout_s):
        log.error("run_writes_not_fenced", task=name, directory=str(directory), timeout_s=timeout_s)


def keep_aside(directory: Path, n: int) -> Path | None:
    """Move a stalled run's directory aside (``attempt-<k>-stalled``), so that its re-run starts clean."""
    if not directory.exists():
        return None
    kept = directory.with_name(f"{directory.name}-stalled" + (f"-{n}" if n > 1 else ""))
    shutil.rmtree(kept, ignore_errors=True)
    directory.rename(kept)
    return kept


def write_result(directory: Path, result: RunResult, *, private: bool = False) -> None:
    """Write the result of a run stopped by the watchdog into its directory (its steps so far are
    there already): why it stalled, or the result of an episode whose clean-up stalled (``private``:
    the run's, ``RunStream.private``)."""
    try:
        make_dir(directory, private=private)
        write_atomic(directory / "result.json", (result.model_dump_json(indent=2) + "\n").encode(), private=private)
    except OSError as exc:
        log.warning("stalled_result_not_written", directory=str(directory), error=str(exc))
        return
    from ..runs.report import render_report

    try:
        render_report(directory, private=private)
    except Exception as exc:  # a report is a convenience: never fail the batch for it
        log.warning("report_failed", directory=str(directory), error=str(exc))


_SKIP_FILES = (os.path.dirname(asyncio.__file__), contextlib.__file__)


def stuck_in(run: asyncio.Task[Any], steps: int, *, opened: bool) -> str:
    """Where a run waits: its step and the innermost webagent calls of its await chain, and the
    library it waits in, e.g. ``step 3: BrowserSession.click > PageControl.click > PageControl._guard
    (in playwright)``."""
    phase = f"step {steps + 1}" if opened else "opening the browser session"
    frames: list[tuple[str, str]] = []  # (qualified name, module)
    obj: Any = run.get_coro()
    for _ in range(500):  # an await chain is short; a bound all the same
        if obj is None:
            break
        if isinstance(obj, asyncio.Task):
            obj = obj.get_coro()
            continue
        if isinstance(obj, asyncio.Future):  # a plain future: the end of the chain
            break
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None) or getattr(obj, "gi_frame", None)
        if frame is not None and not frame.f_code.co_filename.startswith(_SKIP_FILES):
            frames.append((frame.f_code.co_qualname, str(frame.f_globals.get("__name__", ""))))
        for attr in ("cr_await", "ag_await", "gi_yieldfrom"):
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
                break
        else:  # an async generator's asend/athrow, or a future's iterator: what it wraps
            wrapped = (types.AsyncGeneratorType, asyncio.Future)
            obj = next((r for r in gc.get_referents(obj) if isinstance(r, wrapped)), None)
    named = [(name, module) for name, module in frames if not module.startswith("webagent.batch.")]  # the runner's own
    if not named:
        return phase
    ours = [name for name, module in named if module.startswith("webagent.")]
    if not ours:  # not webagent's own run (a subclass's stream, a test's fake)
        return f"{phase}: " + " > ".join(name for name, _ in named[-3:])
    where = " > ".join(ours[-3:])
    if not named[-1][1].startswith("webagent."):
        where += f" (in {named[-1][1].split('.')[0] or 'another module'})"
    return f"{phase}: {where}"
