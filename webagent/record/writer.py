"""``RecordWriter``: the run directories' files written off the event loop.

A step's screenshot and its line in ``trajectory.jsonl``, and at the end ``result.json`` and
``report.html``, are disk writes: about 5 ms a step of the event loop's time on a loaded machine
(a batch's profile, issue 48), where every session's browser commands and model replies wait.
``FilesSink`` hands them to the process's one writer thread (``WRITER``):

- in order: one thread takes the jobs first in, first out, so each run's files are written in the
  order its steps came, and its end after its last step;
- the same bytes: a record is serialized on the loop when it is recorded (``record_step``), the
  thread only writes it;
- bounded: at most ``MAX_JOBS`` jobs wait; past that, recording a step waits for the disk on the
  loop, as every step did before;
- awaited: a run's end (``FilesSink.finish``, also after a cancel or a failure of the run) waits
  for every write of its run. A run cancelled again while it waits leaves its writes to the
  thread, which does them all the same; so does a process that exits (``atexit``) after its runs;
- never silent: a write that fails is logged at once, the run's later writes are dropped (its
  trajectory stays a prefix, as a run that stopped there), and the error is raised at the run's
  next step and at its end, as it was when the loop wrote;
- fenced: a run a batch sets aside (cancelled, its clean-up maybe still going) and re-runs in the
  same directory is fenced first (``RunWrites.fence``): its writes so far are given a bound to be
  done, the rest are revoked (skipped by the thread, and any it submits later), and the fence ends
  once nothing of the run's is being written. Its files stay where it wrote them, whole or a
  prefix, and none lands later in the directory of the run after it.

With no event loop running (a caller writing a run directory itself) a job runs at once.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import queue
import threading
import time
from collections.abc import Callable

import structlog

__all__ = ["MAX_JOBS", "WRITER", "RecordWriter", "RunWrites"]

log = structlog.get_logger("webagent.record")

#: Jobs that may wait for the writer thread before recording a step waits for the disk.
MAX_JOBS = 4096
#: Seconds an exiting process gives the writer thread to finish the jobs still waiting.
EXIT_WAIT_S = 30.0

_Job = tuple[Callable[[], None], asyncio.AbstractEventLoop, "asyncio.Future[None]"]


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():  # its waiter was cancelled: the error, if any, was logged where it happened
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)


class RecordWriter:
    """One thread of this process writing run files, in the order they were handed to it."""

    def __init__(self, max_jobs: int = MAX_JOBS) -> None:
        self.max_jobs = max_jobs
        self._lock = threading.Lock()
        self._pid = 0
        self._queue: queue.Queue[_Job | None] = queue.Queue(max_jobs)
        self._thread: threading.Thread | None = None

    def submit(self, work: Callable[[], None]) -> asyncio.Future[None] | None:
        """``work`` run on the writer thread after every job submitted before it; the future (of the
        running loop) is its outcome. Without a running loop, ``work`` runs now (None)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            work()
            return None
        future: asyncio.Future[None] = loop.create_future()
        self._started().put((work, loop, future))  # waits while max_jobs wait: the disk's pace
        return future

    def _started(self) -> queue.Queue[_Job | None]:
        with self._lock:
            if self._pid != os.getpid():  # first use, or a process forked from one that used it
                self._pid = os.getpid()
                self._queue = queue.Queue(self.max_jobs)
                self._thread = threading.Thread(target=self._run, name="webagent-record-writer", daemon=True)
                self._thread.start()
            return self._queue

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            work, loop, future = job
            error: BaseException | None = None
            try:
                work()
            except Exception as exc:  # handed to the run that waits for it
                error = exc
            try:
                loop.call_soon_threadsafe(_settle, future, error)
            except RuntimeError:  # its loop has closed: no one waits any more
                if error is not None:
                    log.error("record_write_lost", error=str(error) or type(error).__name__)

    def drain(self, timeout_s: float = EXIT_WAIT_S) -> None:
        """Let the thread finish the jobs waiting, then stop it (an exiting process)."""
        with self._lock:
            thread, self._thread = self._thread, None
            if thread is None or self._pid != os.getpid():
                return
            self._pid = 0
        try:  # a full queue behind a hung disk must not hold the exit past timeout_s either
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            log.error("record_writes_left", waiting=self._queue.qsize(), timeout_s=timeout_s)
            return
        thread.join(timeout_s)


class RunWrites:
    """One run's writes through a ``RecordWriter``: in order, the first error kept and raised."""

    def __init__(self, writer: RecordWriter, what: str) -> None:
        self.writer = writer
        self.what = what
        #: The first write of the run that failed (its later writes are not done).
        self.error: Exception | None = None
        #: The run was fenced (``fence``): its writes not begun are skipped, its ends' too.
        self.revoked = False
        self._begun = 0  # its writes going on the thread now (0 or 1: one thread)
        self._lock = threading.Lock()  # revoking and a write beginning: one before the other
        self._last: asyncio.Future[None] | None = None

    def raise_error(self) -> None:
        """The first write error of the run, raised (the writes after it were dropped)."""
        if self.error is not None:
            raise self.error

    def submit(self, work: Callable[[], None], *, always: bool = False) -> None:
        """``work`` after the run's writes so far; skipped once one has failed unless ``always``
        (what closes the run's files); skipped whenever the run has been fenced by then."""

        def job() -> None:
            with self._lock:
                if self.revoked or (self.error is not None and not always):
                    return
                self._begun += 1
            try:
                work()
            except Exception as exc:
                if self.error is None:
                    self.error = exc
                    log.error("record_write_failed", run=self.what, error=str(exc) or type(exc).__name__)
                raise
            finally:
                with self._lock:
                    self._begun -= 1

        future = self.writer.submit(job)
        if future is not None:
            future.add_done_callback(_retrieved)
            self._last = future

    async def flushed(self) -> None:
        """Every write of the run so far done; the run's first write error raised."""
        last = self._last
        if last is not None and not last.done():
            await asyncio.wait([last])
        self.raise_error()

    async def fence(self, timeout_s: float) -> bool:
        """Nothing more of the run written (its directory is about to be set aside, and re-run): its
        writes so far get ``timeout_s`` to be done (its files whole), then the rest are revoked, and
        this returns once the thread writes nothing of the run's any more: True; False when a write
        it had begun was still going at the deadline (a hung disk: it may still land)."""
        deadline = time.monotonic() + timeout_s
        await self._settled(timeout_s)
        with self._lock:  # what the thread has not begun, and whatever the run submits from now on
            self.revoked = True
            begun = self._begun
        if not begun:  # the jobs left (queued behind other runs' maybe) will each skip: nothing lands
            return True
        return await self._settled(deadline - time.monotonic()) or not self._begun  # what it had begun

    async def _settled(self, timeout_s: float) -> bool:
        last = self._last  # in order: once the run's last job is done, all its jobs are
        if last is not None and not last.done():
            await asyncio.wait([last], timeout=max(0.0, timeout_s))
        return last is None or last.done()


def _retrieved(future: asyncio.Future[None]) -> None:
    """Its error, if any, is the run's (``RunWrites.error``): read here so asyncio does not warn."""
    if not future.cancelled():
        future.exception()


#: The writer of this process's run directories.
WRITER = RecordWriter()
atexit.register(WRITER.drain)
