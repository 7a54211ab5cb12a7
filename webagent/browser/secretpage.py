"""A page driver that types secrets and never hands their values back.

``SecretPage`` wraps a ``BrowserSession`` for the loop: ``write`` substitutes ``{{NAME}}``
placeholders (and masks the field it typed a value into), while everything read from the page
that ends up in a prompt or a record -- URL, title, events, option labels, error messages -- is
redacted to the placeholders.

A secret is typed only where its hosts allow (``Secrets.typing_refusal``): the tab's top document
is judged before the click, and after it, before the first key, every document from the top down to
the frame where the field took the focus (a cross-origin frame's page receives what is typed into
it). A refusal is an ``ActionError``: the policy is told, nothing is typed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Literal, TypeVar

from ..errors import ActionError, WebAgentError
from ..files.uploads import Upload
from ..guard.secrets import Secrets
from ..images import Frame, Screenshot
from ..records import Tab
from .session import BrowserSession

__all__ = ["SecretPage"]

T = TypeVar("T")


class SecretPage:
    """``PageDriver`` over a session, with secret substitution on input and redaction on output."""

    def __init__(self, session: BrowserSession, secrets: Secrets, *, hosts: Sequence[str] = ()) -> None:
        """``hosts``: where the secrets without hosts of their own may be typed (host rules; none:
        nowhere), the run's (``Runtime.secret_hosts``)."""
        self.session = session
        self.secrets = secrets
        self.hosts = tuple(hosts)
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
        if not used:
            await self._call(self.session.write(x, y, value, press_enter=press_enter))
            return
        self._allow(text, [self.session.url])  # not even a click on a page the secret may not reach

        def focused(urls: list[str]) -> None:  # the documents of the field that took the focus
            self._allow(text, urls)

        await self._call(self.session.write(x, y, value, press_enter=press_enter, mask=True, before_typing=focused))

    def _allow(self, text: str, urls: list[str]) -> None:
        refusal = self.secrets.typing_refusal(text, urls, self.hosts)
        if refusal is not None:
            raise ActionError(self.secrets.redact(refusal))

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

    async def click_with(
        self,
        x: float,
        y: float,
        *,
        button: Literal["left", "right"] = "left",
        count: int = 1,
        modifiers: Sequence[str] = (),
    ) -> None:
        await self._call(self.session.click_with(x, y, button=button, count=count, modifiers=modifiers))

    async def hover(self, x: float, y: float) -> None:
        await self._call(self.session.hover(x, y))

    async def drag(self, x: float, y: float, to_x: float, to_y: float) -> str:
        return self.secrets.redact(await self._call(self.session.drag(x, y, to_x, to_y)))

    async def scroll_at(self, x: float, y: float, direction: str) -> str:
        return self.secrets.redact(await self._call(self.session.scroll_at(x, y, direction)))

    async def tabs(self) -> list[Tab]:
        tabs = await self._call(self.session.tabs())
        redact = self.secrets.redact
        return [tab.model_copy(update={"title": redact(tab.title), "url": redact(tab.url)}) for tab in tabs]

    async def switch_tab(self, index: int) -> str:
        return self.secrets.redact(await self._call(self.session.switch_tab(index)))

    async def close_tab(self, index: int) -> str:
        return self.secrets.redact(await self._call(self.session.close_tab(index)))

    async def watch_structure(self) -> None:
        await self._call(self.session.watch_structure())

    async def structure_changed(self) -> bool:
        return await self._call(self.session.structure_changed())

    async def unwatch_structure(self) -> None:
        await self._call(self.session.unwatch_structure())
