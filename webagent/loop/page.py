"""What the loop needs from a page (``PageDriver``) and how an action is carried out on one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, assert_never

from ..actions import (
    MODIFIERS,
    Action,
    Answer,
    AskUser,
    ClickElement,
    CloseTab,
    DoubleClickElement,
    DragElement,
    GoBack,
    Goto,
    HoverElement,
    PressKey,
    Refresh,
    RightClickElement,
    Scroll,
    SelectOption,
    SwitchTab,
    UploadFile,
    Wait,
    WriteElement,
)
from ..errors import ActionError
from ..files.uploads import AllowedFiles, Upload
from ..guard.urls import normalize_url
from ..images import Frame, Screenshot
from ..records import Point, Tab
from ..roles.localizer import Localizer
from ..roles.policy import Policy
from ..roles.validator import Validator

__all__ = ["PageDriver", "Placed", "Roles", "perform"]


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

    # -- more hands: pointer actions, a panel's wheel, tabs (none costs anything unless used) ----------
    async def click_with(
        self,
        x: float,
        y: float,
        *,
        button: Literal["left", "right"] = "left",
        count: int = 1,
        modifiers: Sequence[str] = (),
    ) -> None:
        """A click of ``button``, ``count`` times (2: a double click), holding ``modifiers``
        (Playwright's key names: Shift, Control, Alt, Meta)."""
        ...

    async def hover(self, x: float, y: float) -> None:
        """Move the pointer to (x, y) and leave it there, until the page has reacted."""
        ...

    async def drag(self, x: float, y: float, to_x: float, to_y: float) -> str:
        """Press at (x, y), move to (to_x, to_y) in several steps, release there; what moved."""
        ...

    async def scroll_at(self, x: float, y: float, direction: str) -> str:
        """Turn the wheel over (x, y) (the panel there scrolls, not the page); how far it moved."""
        ...

    async def tabs(self) -> list[Tab]:
        """The open tabs when there are several (none listed when there is one)."""
        ...

    async def switch_tab(self, index: int) -> str: ...
    async def close_tab(self, index: int) -> str: ...
    async def watch_structure(self) -> None:
        """Start counting elements added to or removed from the page (several actions a turn)."""
        ...

    async def structure_changed(self) -> bool:
        """Whether the last action added or removed elements, or the page could not tell (then True)."""
        ...

    async def unwatch_structure(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Roles:
    """The three model roles of one session."""

    policy: Policy
    localizer: Localizer
    validator: Validator


@dataclass(frozen=True, slots=True)
class Placed:
    """Where an action acts: its point, and a drag's target (where it is released)."""

    point: Point | None = None
    target: Point | None = None


async def perform(
    page: PageDriver,
    action: Action,
    point: Point | None,
    uploads: AllowedFiles | None = None,
    target: Point | None = None,
) -> str:
    """Carry out a browser action (not an answer, not a question) at ``point`` (a drag: released at
    ``target``; a scroll: at the page's centre without one); the outcome told to the policy.
    ``uploads``: the files ``upload_file`` may name (none without)."""
    x, y = point.viewport if point else (0.0, 0.0)
    match action:
        case ClickElement(modifiers=None):
            await page.click(x, y)
        case ClickElement(modifiers=held):
            await page.click_with(x, y, modifiers=_keys(held))
        case DoubleClickElement(modifiers=held):
            await page.click_with(x, y, count=2, modifiers=_keys(held))
        case RightClickElement():
            await page.click_with(x, y, button="right")
        case HoverElement():
            await page.hover(x, y)
        case DragElement():
            if target is None:
                raise ActionError("the drag has no target point: say where to release it")
            return await page.drag(x, y, *target.viewport)
        case Scroll(direction=direction) if point is not None:
            return await page.scroll_at(x, y, direction)
        case SwitchTab(index=index):
            return await page.switch_tab(index)
        case CloseTab(index=index):
            return await page.close_tab(index)
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


def _keys(held: Sequence[str] | None) -> tuple[str, ...]:
    return tuple(MODIFIERS[name] for name in held or ())
