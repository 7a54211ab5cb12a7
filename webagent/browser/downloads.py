"""Files a page downloads: kept in the run's folder (``[browser] downloads = "keep"``) or refused.

Playwright owns the downloads (a context that keeps them is made with ``accept_downloads``):
Chromium writes each into Playwright's own private temporary folder, and the session copies the
finished file into the run's ``DownloadFolder`` (``webagent.files.downloads``: the name made safe, unique,
never outside the folder) and deletes Playwright's copy. The policy's next observation says
``Downloaded: NAME (N bytes)``; the run's result lists each file (``DownloadedFile``).

Limits, each told to the policy in one line:

* **size** (``max_download_mb``): the session's own CDP session reports each download's progress
  (``Page.downloadWillBegin``, ``Page.downloadProgress``: its ``Content-Length`` when the server
  sends one, then the bytes received); past the limit the download is cancelled
  (``Download.cancel``) at once. The finished file is measured again while it is copied, so a
  download the progress events did not cover (another tab's) is never kept larger either;
* **count** (``max_downloads`` a run): those past it are cancelled one after another by one
  background task, each command bounded, and told as one line per observation however many the
  page started (a flood of 1,000 costs no step any wait and writes no file);
* **time** (``download_timeout_s``): a download not finished by then is cancelled.

A download that fails (the server broke off, the browser refused it) is told with its error. After
an action, ``settle`` waits (within its cap) until each download the action started is told; one
still running then is told as in progress, and told again when it ends.

``refuse``: the context does not accept downloads (Chromium cancels each); in a caller's context,
which keeps its own ``accept_downloads``, the session cancels them. Either way each is told, in one
line per observation. Under the navigation guard a download from a host it refuses never starts:
its request is refused like any other (``webagent.browser.guard``).

A page may be driven by two sessions at once (an MCP session's own and a run on its page): the
one that began driving it last handles its downloads, the other leaves them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from playwright.async_api import Download, Page
from playwright.async_api import Error as PlaywrightError

from ..files.downloads import DownloadFolder, TooLarge, safe_name
from ..guard.secrets import shorten
from ..records import DownloadedFile
from .deadline import within
from .state import PageState, first_line

__all__ = ["PageDownloads"]

log = structlog.get_logger("webagent.browser")

#: The sessions driving each page, the last one first to take its downloads.
_DRIVERS: weakref.WeakKeyDictionary[Page, list[PageDownloads]] = weakref.WeakKeyDictionary()
_URL_CHARS = 200  # a URL in a line for the policy (a data: URL may be megabytes)
_NAMES_LISTED = 3  # names a line about several refused downloads quotes
CLOSE_WAIT_S = 2.0  # how long closing waits for its downloads' tasks to end once cancelled


@dataclass(eq=False)
class _Kept:
    """A download being kept."""

    download: Download
    name: str
    url: str
    guid: str | None
    seq: int
    too_large: bool = False
    done: bool = False
    told_running: bool = False


class PageDownloads:
    """The downloads of the pages a session drives: kept or refused, limited, told."""

    def __init__(self, state: PageState) -> None:
        self._state = state
        config = state.config
        self.keep = config.downloads == "keep"
        self._max_bytes = int(config.max_download_mb * 1024 * 1024)
        self._folder: DownloadFolder | None = None
        self._own_folder = False  # made by the session itself (none was given): removed at close
        #: The files kept, in the order they ended.
        self.kept: list[DownloadedFile] = []
        self._started = 0  # downloads taken to be kept (max_downloads counts them)
        self._seq = 0  # each download seen, in order
        self._mark = 0  # self._seq when the current action began
        self._kept: list[_Kept] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._begun: dict[str, tuple[str, int]] = {}  # CDP guid -> (url, seq), before Playwright's event
        self._progress: dict[str, int] = {}  # CDP guid -> the largest size it announced or reached
        self._guids: dict[str, _Kept] = {}  # CDP guid -> the download being kept
        self._seen: set[str] = set()  # CDP guids Playwright announced (kept, refused or past the limit)
        self._refused: list[str] = []  # names refused since the last drain (downloads = "refuse")
        self._over = 0  # downloads past max_downloads since the last drain
        self._cancels: list[Download] = []
        self._canceller: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._pages: weakref.WeakSet[Page] = weakref.WeakSet()
        state.on_page(self._watch)
        state.on_cdp("Page.downloadWillBegin", self._on_will_begin)
        state.on_cdp("Page.downloadProgress", self._on_progress)
        state.on_drain(self._summary)

    def keep_in(self, folder: DownloadFolder) -> None:
        """Keep the downloads in ``folder`` (before the first one; default: a temporary folder of
        the session's own, removed when it closes)."""
        self._folder = folder

    def _folder_now(self) -> DownloadFolder:
        if self._folder is None:
            self._folder, self._own_folder = DownloadFolder(), True
        return self._folder

    # -- events ------------------------------------------------------------------------------------
    def _watch(self, page: Page) -> None:
        _DRIVERS.setdefault(page, []).append(self)
        self._pages.add(page)
        self._state.listen(page, "download", self._on_download)

    def _ours(self, page: Page) -> bool:
        drivers = _DRIVERS.get(page)
        return not drivers or drivers[-1] is self

    def _on_will_begin(self, params: dict[str, Any]) -> None:
        # On the session's own CDP session, in order with settle's round trip: the action's download is
        # known before Playwright's event (which may come after the check answered).
        guid, url = str(params.get("guid", "")), str(params.get("url", ""))
        if params.get("frameId") == self._state.main_frame_id:
            self._state.nav.settled()  # a link to a file asked for a navigation that will never commit
        if not guid or guid in self._seen:
            return
        unmatched = next((k for k in self._kept if k.guid is None and k.download.url == url), None)
        if unmatched is not None:  # announced by Playwright first, and matched by its URL now
            self._match(unmatched, guid)
            return
        self._seq += 1
        self._begun[guid] = (url, self._seq)
        self._changed.set()

    def _match(self, kept: _Kept, guid: str) -> None:
        kept.guid = guid
        self._seen.add(guid)
        self._guids[guid] = kept
        self._check_size(kept, self._progress.get(guid, 0))

    def _on_progress(self, params: dict[str, Any]) -> None:
        guid = str(params.get("guid", ""))
        size = max(int(params.get("totalBytes") or 0), int(params.get("receivedBytes") or 0))
        if params.get("state") in ("completed", "canceled"):
            self._begun.pop(guid, None)
            self._progress.pop(guid, None)
        else:
            self._progress[guid] = max(size, self._progress.get(guid, 0))
        kept = self._guids.get(guid)
        if kept is not None:
            self._check_size(kept, size)

    def _check_size(self, kept: _Kept, size: int) -> None:
        if size > self._max_bytes and not kept.too_large and not kept.done:
            kept.too_large = True
            self._cancel(kept.download)

    def _on_download(self, download: Download) -> None:
        if not self._ours(download.page):
            return
        self._state.nav.settled()  # a link to a file asked for a navigation that will never commit
        guid = self._guid_of(download)
        if guid is not None:
            self._seen.add(guid)
        seq = self._begun.pop(guid, ("", 0))[1] if guid is not None else 0
        if not seq:
            self._seq += 1
            seq = self._seq
        name = safe_name(download.suggested_filename or "")
        if not self.keep:
            self._refused.append(name)
            self._cancel(download)
        elif self._started >= self._state.config.max_downloads:
            self._over += 1
            self._cancel(download)
        else:
            self._started += 1
            kept = _Kept(download, name, shorten(download.url, _URL_CHARS), None, seq)
            self._kept.append(kept)
            if guid is not None:
                self._match(kept, guid)
            task = asyncio.get_running_loop().create_task(self._keep(kept), name=f"webagent-download:{name}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._changed.set()

    def _guid_of(self, download: Download) -> str | None:
        """The CDP guid of a Playwright download: the name of the file Playwright gives it, else that
        of the first download begun from the same URL that is not matched yet."""
        try:
            absolute = download._impl_obj._artifact._initializer["absolutePath"]
        except (AttributeError, KeyError, TypeError):  # not this driver's layout: matched by URL
            absolute = None
        if isinstance(absolute, str) and absolute:
            return Path(absolute).name
        return next((g for g, (url, _) in self._begun.items() if url == download.url), None)

    # -- keeping one ---------------------------------------------------------------------------------
    async def _keep(self, kept: _Kept) -> None:
        try:
            told = await self._fetch(kept)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not end the run: the download is told as lost
            log.warning("download_not_kept", name=kept.name, error=repr(exc))
            told = f"The download of {kept.name!r} could not be kept: {first_line(exc)}."
        finally:
            kept.done = True
            if kept.guid is not None:
                self._guids.pop(kept.guid, None)
            self._changed.set()
        self._state.report(told)

    async def _fetch(self, kept: _Kept) -> str:
        """Wait for the download to finish, copy it into the folder; what the policy is told."""
        config = self._state.config
        download, name = kept.download, kept.name
        try:
            async with asyncio.timeout(config.download_timeout_s):
                failure = await download.failure()
        except TimeoutError:
            self._cancel(download)
            return (
                f"The download of {name!r} did not finish within {config.download_timeout_s:g} s "
                "([browser] download_timeout_s); it was cancelled."
            )
        except PlaywrightError as exc:
            failure = first_line(exc)
        if kept.too_large:
            return self._too_large(kept)
        if failure:
            return f"The download of {name!r} ({kept.url}) failed: {failure}."
        try:
            saved, path, size = await self._save(download, name)
        except TooLarge:
            return self._too_large(kept)
        except OSError as exc:
            log.warning("download_not_saved", name=name, error=str(exc))
            return f"The download of {name!r} could not be saved: {exc.strerror or exc}."
        self.kept.append(DownloadedFile(name=saved, path=str(path), bytes=size, url=kept.url))
        if self._state.owns_context:  # Playwright's copy, in its temporary folder: not kept twice
            with contextlib.suppress(PlaywrightError):
                await within(download.delete(), config.command_timeout_s, "download.delete")
        return f"Downloaded: {saved} ({size} bytes)"

    async def _save(self, download: Download, name: str) -> tuple[str, Path, int]:
        """The finished download copied into the folder (a remote browser's through Playwright)."""
        config = self._state.config
        folder = self._folder_now()
        try:
            source: Path | None = await within(download.path(), config.command_timeout_s, "download.path")
        except PlaywrightError as exc:  # a browser on another machine: its bytes come through the driver
            log.debug("download_streamed", name=name, reason=first_line(exc))
            source = None
        if source is not None:
            return await asyncio.to_thread(folder.keep_copy, source, name, self._max_bytes)
        partial = await asyncio.to_thread(folder.partial)
        try:
            await within(download.save_as(partial), config.download_timeout_s, "download.save_as")
            return await asyncio.to_thread(folder.place, partial, name, self._max_bytes)
        except PlaywrightError as exc:
            raise OSError(first_line(exc)) from None
        finally:  # past its deadline, cancelled or refused (a fenced folder): no partial file left
            partial.unlink(missing_ok=True)

    def _too_large(self, kept: _Kept) -> str:
        limit = self._state.config.max_download_mb
        return (
            f"The download of {kept.name!r} ({kept.url}) was cancelled: it is larger than {limit:g} MB "
            "([browser] max_download_mb)."
        )

    # -- cancelling ---------------------------------------------------------------------------------
    def _cancel(self, download: Download) -> None:
        """Cancel ``download`` in the background (one task for all, each command bounded), and delete
        what Playwright kept of it in a context of the session's own."""
        self._cancels.append(download)
        if self._canceller is None or self._canceller.done():
            self._canceller = asyncio.get_running_loop().create_task(
                self._cancel_all(), name="webagent-download-cancels"
            )

    async def _cancel_all(self) -> None:
        timeout_s = self._state.config.command_timeout_s
        while self._cancels:
            download = self._cancels.pop(0)
            with contextlib.suppress(PlaywrightError):
                await within(download.cancel(), timeout_s, "download.cancel")
                if self._state.owns_context:
                    await within(download.delete(), timeout_s, "download.delete")

    # -- what the policy is told --------------------------------------------------------------------
    def _summary(self) -> list[str]:
        """The downloads refused or past the limit since the last drain, one line each kind."""
        lines: list[str] = []
        refused, self._refused = self._refused, []
        if refused:
            quoted = ", ".join(repr(shorten(n, 80)) for n in refused[:_NAMES_LISTED])
            more = f" and {len(refused) - _NAMES_LISTED} more" if len(refused) > _NAMES_LISTED else ""
            what = f"a download of {quoted}" if len(refused) == 1 else f"{len(refused)} downloads ({quoted}{more})"
            them = "it was" if len(refused) == 1 else "they were"
            lines.append(
                f'The page started {what}; downloads are refused ([browser] downloads = "refuse"), so {them} cancelled.'
            )
        over, self._over = self._over, 0
        if over:
            limit = self._state.config.max_downloads
            them = "it was" if over == 1 else "they were"
            lines.append(
                f"The page started {over} more download{'s' if over != 1 else ''} past the {limit} a run keeps "
                f"([browser] max_downloads); {them} cancelled."
            )
        return lines

    def before_action(self) -> None:
        """An action begins: ``settle`` waits for the downloads it starts, not for earlier ones."""
        self._mark = self._seq

    async def settle(self, deadline: float) -> None:
        """Until each download the action started is told (kept, refused, failed), at most until
        ``deadline``; one still running then is told as in progress."""
        while self._waiting() and (remaining := deadline - time.monotonic()) > 0:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
        for kept in self._kept:
            if not kept.done and not kept.told_running:
                kept.told_running = True
                self._state.report(f"A download of {kept.name!r} is in progress; it is told when it ends.")
        self._kept = [k for k in self._kept if not k.done]

    def _waiting(self) -> bool:
        return any(seq > self._mark for _, seq in self._begun.values()) or any(
            k.seq > self._mark and not k.done for k in self._kept
        )

    # -- closing ------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop taking downloads: the ones being kept are cancelled (a context closing cancels its
        downloads too), the temporary folder of the session's own removed."""
        for page in list(self._pages):
            drivers = _DRIVERS.get(page)
            if drivers is not None and self in drivers:
                drivers.remove(self)
        tasks = [*self._tasks, *([self._canceller] if self._canceller is not None else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_WAIT_S):
                    await asyncio.gather(*tasks, return_exceptions=True)
        folder = self._folder
        if folder is not None:
            await asyncio.to_thread(folder.forget_partials)
            if self._own_folder:
                await asyncio.to_thread(folder.remove)
