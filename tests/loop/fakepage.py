"""A fake page driver for the loop's tests: records what the loop asks of it, changes its screenshot,
adds elements or fails on demand."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

from PIL import Image

from webagent.errors import ActionError
from webagent.images import Frame, Screenshot
from webagent.records import Tab

__all__ = ["FakePage", "png"]


def png(w: int, h: int, look: int = 0) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (200, 220, look % 256)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


class FakePage:
    """A PageDriver that records what the loop asks of it."""

    def __init__(self, url: str = "http://127.0.0.1:1/start") -> None:
        self.viewport = (1280, 800)
        self._url = url
        self.calls: list[tuple[Any, ...]] = []
        self.shots = 0
        self.events: list[str] = []
        self.fail: dict[str, str] = {}
        self._png: dict[tuple[int, int, int], str] = {}
        self.text = "fake page text"
        #: What the screenshot shows; with ``changing`` every action changes it.
        self.look = 0
        self.changing = False
        #: Actions after which the page says elements were added or removed (several actions a turn).
        self.restructuring: set[str] = set()
        self._restructured = False
        self.watched = 0
        self.open_tabs: list[Tab] = []

    @property
    def url(self) -> str:
        return self._url

    async def title(self) -> str:
        return "Fake page"

    async def page_text(self) -> str:
        return self.text

    async def screenshot(self, frame: Frame) -> Screenshot:
        self.shots += 1
        key = (frame.image_width, frame.image_height, self.look)
        if key not in self._png:
            self._png[key] = png(*key)
        return Screenshot(self._png[key], "image/png", frame)

    def drain_events(self) -> list[str]:
        events, self.events = self.events, []
        return events

    def drain_recoveries(self) -> list[str]:
        return []

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        if self.changing:
            self.look += 1
        self._restructured = call[0] in self.restructuring
        if call[0] in self.fail:
            raise ActionError(self.fail.pop(call[0]))

    async def goto(self, url: str, *, start: bool = False) -> None:
        self._record("goto", url)
        self._url = url

    async def go_back(self) -> None:
        self._record("go_back")

    async def refresh(self) -> None:
        self._record("refresh")

    async def click(self, x: float, y: float) -> None:
        self._record("click", round(x), round(y))

    async def write(self, x: float, y: float, text: str, *, press_enter: bool) -> None:
        self._record("write", round(x), round(y), text, press_enter)

    async def scroll(self, direction: str) -> None:
        self._record("scroll", direction)

    async def press(self, key: str) -> None:
        self._record("press", key)

    async def select_option(self, x: float, y: float, option: str) -> str:
        self._record("select", round(x), round(y), option)
        return option

    async def wait(self, seconds: float) -> None:
        self._record("wait", seconds)

    async def click_with(
        self, x: float, y: float, *, button: str = "left", count: int = 1, modifiers: Sequence[str] = ()
    ) -> None:
        self._record("click_with", round(x), round(y), button, count, tuple(modifiers))

    async def hover(self, x: float, y: float) -> None:
        self._record("hover", round(x), round(y))

    async def drag(self, x: float, y: float, to_x: float, to_y: float) -> str:
        self._record("drag", round(x), round(y), round(to_x), round(to_y))
        return "ok, dragged"

    async def scroll_at(self, x: float, y: float, direction: str) -> str:
        self._record("scroll_at", round(x), round(y), direction)
        return f"ok, scrolled {direction}"

    async def tabs(self) -> list[Tab]:
        return list(self.open_tabs)

    async def switch_tab(self, index: int) -> str:
        self._record("switch_tab", index)
        return f"ok, switched to tab {index}"

    async def close_tab(self, index: int) -> str:
        self._record("close_tab", index)
        return f"ok, closed tab {index}"

    async def watch_structure(self) -> None:
        self.watched += 1

    async def structure_changed(self) -> bool:
        return self._restructured

    async def unwatch_structure(self) -> None:
        self.watched -= 1
