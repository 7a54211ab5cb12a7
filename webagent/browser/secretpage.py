"""A page driver that types secrets and never hands their values back.

``SecretPage`` wraps a ``BrowserSession`` for the loop: ``write`` substitutes ``{{NAME}}``
placeholders (and masks the field it typed a value into), while everything read from the page
that ends up in a prompt or a record -- URL, title, events, option labels, error messages -- is
redacted to the placeholders.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from ..errors import WebAgentError
from ..images import Frame, Screenshot
from ..secrets import Secrets
from ..uploads import Upload
from .session import BrowserSession

__all__ = ["SecretPage"]

T = TypeVar("T")


class SecretPage:
    """``PageDriver`` over a session, with secret substitution on input and redaction on output."""

    def __init__(self, session: BrowserSession, secrets: Secrets) -> None:
        self.session = session
        self.secrets = secrets
        self.viewport = session.viewport

    @property
    def url(self) -> str:
        return self.secrets.redact(self.session.url)

    async def _call(self, awaitable: Awaitable[T]) -> T:
        try:
            return await awaitable
        except WebAgentError as exc:
            text = str(exc)
            clean = self.secrets.redact(text)
            if clean == text:
                raise
            raise type(exc)(clean) from None

    async def title(self) -> str:
        return self.secrets.redact(await self._call(self.session.title()))

    async def page_text(self) -> str:
        """Redacted too: replay fingerprints hash it, and a hash of a secret is not for the cache file."""
        return self.secrets.redact(await self._call(self.session.page_text()))

    async def screenshot(self, frame: Frame) -> Screenshot:
        return await self._call(self.session.screenshot(frame))

    def drain_events(self) -> list[str]:
        return [self.secrets.redact(e) for e in self.session.drain_events()]

    def drain_recoveries(self) -> list[str]:
        return [self.secrets.redact(e) for e in self.session.drain_recoveries()]

    async def goto(self, url: str, *, start: bool = False) -> None:
        await self._call(self.session.goto(url, start=start))

    async def go_back(self) -> None:
        await self._call(self.session.go_back())

    async def refresh(self) -> None:
        await self._call(self.session.refresh())

    async def click(self, x: float, y: float) -> None:
        await self._call(self.session.click(x, y))

    async def write(self, x: float, y: float, text: str, *, press_enter: bool) -> None:
        value, used = self.secrets.substitute(text)
        await self._call(self.session.write(x, y, value, press_enter=press_enter, mask=used))

    async def scroll(self, direction: str) -> None:
        await self._call(self.session.scroll(direction))

    async def press(self, key: str) -> None:
        await self._call(self.session.press(key))

    async def select_option(self, x: float, y: float, option: str) -> str:
        return self.secrets.redact(await self._call(self.session.select_option(x, y, option)))

    async def wait(self, seconds: float) -> None:
        await self._call(self.session.wait(seconds))

    async def upload_file(self, x: float, y: float, file: Upload) -> str:
        return self.secrets.redact(await self._call(self.session.upload_file(x, y, file)))

    async def evaluate(self, script: str, arg: object = None) -> object:
        return await self._call(self.session.evaluate(script, arg))
