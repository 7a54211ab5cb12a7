"""Where a batch's files go: a local folder, or any fsspec URL (``s3://bucket/prefix``, ``gs://...``,
``memory://...``), staged locally.

A local path (or ``file://``) is written as it always was: in place, nothing copied. A URL gets a
local staging folder: the runs write their files there (the recorder's sinks, the worker
processes, Ray's actors on this machine), and ``results.jsonl`` is kept there with its atomic
appended lines. When a task's line is written, its run folder (``runs/<task>/``) is uploaded,
then ``results.jsonl`` as a whole object in place of the last one, in that order: an object
store has no append, but a PUT replaces an object atomically, so a reader (and a resume) sees the
old file or the new one, never half a line, and never a line whose run files are not there yet.
On resume the store's ``results.jsonl`` is read back into the staging folder first. A task whose
line never reached the store (a driver killed between the two) runs again on resume.

Each upload has a deadline and retries (``UPLOAD_TRIES``); one that keeps failing is an
infrastructure failure (``OutputError``), with the staging folder kept and named, so no finished
work is lost. Where the store is and who may write there is fsspec's own configuration: the
environment's ``AWS_*`` variables for S3 (``AWS_ENDPOINT_URL`` for an S3-compatible server), or
any storage option as ``FSSPEC_<PROTOCOL>_<OPTION>`` (``FSSPEC_S3_ENDPOINT_URL``).
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import fsspec
import structlog
from fsspec.core import split_protocol
from fsspec.registry import known_implementations
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from ..errors import InputError, WebAgentError

__all__ = ["UPLOAD_TIMEOUT_S", "UPLOAD_TRIES", "BatchOutput", "OutputError"]

log = structlog.get_logger("webagent.batch")

#: Seconds one upload (a run folder, results.jsonl) or the first look at the store may take.
UPLOAD_TIMEOUT_S = 120.0
#: Tries of each upload before the batch gives up on the store.
UPLOAD_TRIES = 3
#: Storage options for S3 when the user's own say nothing: short connect deadlines, few retries,
#: so an endpoint that does not answer is told in seconds, not minutes.
_S3_DEFAULTS = {"config_kwargs": {"connect_timeout": 5, "read_timeout": 60, "retries": {"max_attempts": 2}}}
LOCAL = {None, "file", "local"}


class OutputError(WebAgentError):
    """The batch's output store cannot be reached or written (its uploads kept failing): the
    machinery's failure, not a task's; what was not uploaded is kept in the staging folder."""

    infrastructure = True


class BatchOutput:
    """A batch's output: ``local`` is where the runs write; ``url`` (None for a local path) is where
    it is uploaded to, task by task."""

    def __init__(self, output: str | Path) -> None:
        text = str(output)
        protocol, path = split_protocol(text)
        if protocol in LOCAL:
            self.url: str | None = None
            self.local = Path(path)
            self._fs: fsspec.AbstractFileSystem | None = None
            return
        if protocol not in known_implementations and protocol not in fsspec.available_protocols():
            raise InputError(
                f"--output {text!r}: unknown storage protocol {protocol!r} (a local path, s3://, gs://...)"
            )
        try:
            cls = fsspec.get_filesystem_class(protocol)
        except ImportError as e:
            extra = "webagent[s3]" if protocol in ("s3", "s3a") else "its fsspec package"
            raise InputError(f"--output {text!r} needs {extra} installed ({e})") from None
        options = fsspec.config.conf.get(protocol, {})
        defaults = _S3_DEFAULTS if protocol in ("s3", "s3a") and "config_kwargs" not in options else {}
        self._fs = cls(**defaults)  # fsspec's configuration (FSSPEC_S3_*) is applied over these
        self.url = text.rstrip("/")
        self.local = Path(tempfile.mkdtemp(prefix="webagent-output-"))
        self._root = self._fs._strip_protocol(self.url)
        self._uploads: asyncio.Queue[str | None] = asyncio.Queue()
        self._failed: BaseException | None = None

    @property
    def remote(self) -> bool:
        return self.url is not None

    def display(self) -> str:
        return self.url or str(self.local)

    async def open(self) -> None:
        """Check the store answers and holds a folder there, and read its ``results.jsonl`` back
        into the staging folder (a resume)."""
        if self._fs is None:
            return
        try:
            await self._bounded(self._pull)
        except (FileNotFoundError, PermissionError) as e:
            raise InputError(f"--output {self.url}: {_reason(e)}") from None
        except OutputError as e:
            raise OutputError(f"--output {self.url}: the store did not answer ({e})") from None

    def _pull(self) -> None:
        assert self._fs is not None
        bucket = self._root.split("/", 1)[0]
        try:  # info, not exists: exists says False for an endpoint that does not answer
            self._fs.info(bucket)
        except FileNotFoundError:
            raise FileNotFoundError(f"no bucket or folder {bucket!r} there") from None
        remote = f"{self._root}/results.jsonl"
        if self._fs.exists(remote):
            self._fs.get_file(remote, str(self.local / "results.jsonl"))
            log.info("output_resumed_from_store", url=self.url)

    def task_done(self, run_dir: str) -> None:
        """A task's line was written: its run folder (``runs/<dir>``), then ``results.jsonl``, go up."""
        if self._fs is not None:
            self._uploads.put_nowait(run_dir)

    async def uploader(self) -> None:
        """Uploads what ``task_done`` queued, one at a time, until ``close`` (run as a task)."""
        while (run_dir := await self._uploads.get()) is not None:
            if self._failed is None:
                try:
                    await self._bounded(functools.partial(self._push, run_dir))
                except OutputError as e:
                    self._failed = OutputError(f"uploading runs/{run_dir} to {self.url}: {e}")
                    log.error("output_upload_failed", url=self.url, staging=str(self.local), error=str(e))

    def _push(self, run_dir: str) -> None:
        assert self._fs is not None
        folder = self.local / "runs" / run_dir
        if folder.is_dir():
            self._fs.put(str(folder), f"{self._root}/runs/{run_dir}", recursive=True)
        self.put("results.jsonl")

    def put(self, name: str) -> None:
        """Upload the staging folder's file ``name`` in place of the store's (a whole object)."""
        if self._fs is not None:
            self._fs.put_file(str(self.local / name), f"{self._root}/{name}")

    async def close(self, uploading: asyncio.Task[None] | None) -> None:
        """Wait for the uploads queued, then raise ``OutputError`` if one kept failing."""
        if self._fs is None or uploading is None:
            return
        self._uploads.put_nowait(None)
        await uploading
        if self._failed is not None:
            raise OutputError(
                f"{self._failed}; the batch's files are kept in {self.local}: copy them to {self.url}, "
                "or run the batch again once the store answers (the tasks not uploaded run again)"
            )

    async def publish(self, name: str) -> None:
        """Upload ``name`` (``summary.json``) with the same deadline and retries."""
        if self._fs is not None:
            await self._bounded(functools.partial(self.put, name))

    async def publish_all(self) -> None:
        """Upload the whole staging folder (one run's directory: ``webagent run --output URL``)."""
        if self._fs is not None:
            await self._bounded(functools.partial(self._fs.put, f"{self.local}/", self._root, recursive=True))

    def discard(self) -> None:
        """Remove the staging folder (everything in it is in the store)."""
        if self._fs is not None and self._failed is None:
            shutil.rmtree(self.local, ignore_errors=True)

    async def _bounded(self, call: Callable[[], None]) -> None:
        """``call`` in a thread, each try bounded by ``UPLOAD_TIMEOUT_S``, tried ``UPLOAD_TRIES`` times
        (a missing bucket or a refusal at once: trying again would not help)."""
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(UPLOAD_TRIES),
                wait=wait_exponential(multiplier=0.5, max=10),
                retry=retry_if_exception(_transient),
                reraise=True,
            ):
                with attempt:
                    await asyncio.wait_for(asyncio.to_thread(call), UPLOAD_TIMEOUT_S)
        except (FileNotFoundError, PermissionError):
            raise
        except TimeoutError:
            raise OutputError(f"no answer within {UPLOAD_TIMEOUT_S:.0f} s") from None
        except Exception as e:
            raise OutputError(_reason(e)) from None


def _transient(error: BaseException) -> bool:
    return isinstance(error, Exception) and not isinstance(error, (FileNotFoundError, PermissionError, InputError))


def _reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
