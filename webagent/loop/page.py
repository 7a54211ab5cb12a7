"""What the loop needs from a page (``PageDriver``) and how an action is carried out on one."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Protocol, assert_never

from ..actions import (
    Action,
    Answer,
    AskUser,
    ClickElement,
    GoBack,
    Goto,
    PressKey,
    Refresh,
    Scroll,
    SelectOption,
    UploadFile,
    Wait,
    WriteElement,
)
from ..errors import ActionError
from ..images import Frame, Screenshot
from ..records import Point
from ..roles.localizer import Localizer
from ..roles.policy import Policy
from ..roles.validator import Validator
from ..uploads import AllowedFiles, Upload
from ..urls import normalize_url

__all__ = ["PageDriver", "Roles", "perform"]


class PageDriver(Protocol):
    """What the loop needs from a browser session (``BrowserSession`` implements it)."""

    viewport: tuple[int, int]

    @property
    def url(self) -> str: ...
    async def title(self) -> str: ...
    async def page_text(self) -> str: ...
    async def screenshot(self, frame: Frame) -> Screenshot: ...
    def drain_events(self) -> list[str]: ...
    def drain_recoveries(self) -> list[str]: ...
    async def goto(self, url: str, *, start: bool = False) -> None: ...
    async def go_back(self) -> None: ...
    async def refresh(self) -> None: ...
    async def click(self, x: float, y: float) -> None: ...
    async def write(self, x: float, y: float, text: str, *, press_enter: bool) -> None: ...
    async def scroll(self, direction: str) -> None: ...
    async def press(self, key: str) -> None: ...
    async def select_option(self, x: float, y: float, option: str) -> str: ...
    async def wait(self, seconds: float) -> None: ...
    async def upload_file(self, x: float, y: float, file: Upload) -> str:
        """Give ``file`` (its bytes, read when it was allowed) to the file input (or the chooser that a
        click opens) at (x, y); its outcome."""
        ...

    async def evaluate(self, script: str, arg: object = None) -> object:
        """Run a script in the page (a task reading its own state: ``loop.task``), bounded."""
        ...


@dataclass(frozen=True, slots=True)
class Roles:
    """The three model roles of one session."""

    policy: Policy
    localizer: Localizer
    validator: Validator


async def perform(page: PageDriver, action: Action, point: Point | None, uploads: AllowedFiles | None = None) -> str:
    """Carry out a browser action (not an answer, not a question) at ``point``; the outcome told to the
    policy. ``uploads``: the files ``upload_file`` may name (none without)."""
    x, y = point.viewport if point else (0.0, 0.0)
    match action:
        case ClickElement():
            await page.click(x, y)
        case WriteElement(content=content, press_enter=enter):
            await page.write(x, y, content, press_enter=enter)
        case SelectOption(option=option):
            label = await page.select_option(x, y, option)
            return f"ok, selected {label!r}"
        case Scroll(direction=direction):
            await page.scroll(direction)
        case PressKey(key=key):
            await page.press(key)
        case Goto(url=url):
            await page.goto(normalize_url(url, error=ActionError))
        case GoBack():
            await page.go_back()
        case Refresh():
            await page.refresh()
        case Wait(seconds=seconds):
            await page.wait(seconds)
        case UploadFile(file=name):  # opened, checked and read in one go: the page gets those bytes
            return await page.upload_file(x, y, await asyncio.to_thread((uploads or AllowedFiles()).open, name))
        case Answer() | AskUser():  # pragma: no cover - answers go to the validator, questions to a person
            raise AssertionError("answers are validated and questions asked, not acted")
        case _:
            assert_never(action)
    return "ok"
