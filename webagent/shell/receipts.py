"""Receipts: what an action did to the page, told in one line and as data.

A ``Before`` is taken just before the action (URL, title, tabs, downloads, a screenshot); after it,
``receipt`` compares: the element under the point (``role "name"``), the share of the viewport that
changed and the box holding the change, a new URL or title, a tab opened, the dialogs and how they
were answered (the session's page events), a download, a field's value after typing. Nothing
changed at all is exit 3; a page that looks like a bot challenge, exit 5.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

from PIL import Image, ImageChops
from pydantic import BaseModel, Field

from ..records import DownloadedFile

__all__ = ["Before", "Receipt", "changed_area", "looks_like_challenge"]

_CHALLENGE = re.compile(
    r"just a moment|verify (that )?you are (a )?human|are you a robot|captcha|attention required|"
    r"checking your browser|unusual traffic",
    re.IGNORECASE,
)


@dataclass
class Before:
    url: str
    title: str
    tabs: int
    downloads: int
    png: bytes = field(repr=False)


class Receipt(BaseModel):
    """What one action did (``--json``: these fields)."""

    action: str = Field(description="The action as webagent's action space names it")
    target: str | None = Field(default=None, description='The element under the point: role "name"')
    point: tuple[float, float] | None = None
    changed: float = Field(default=0.0, description="Share of the viewport whose pixels changed, 0..1")
    box: tuple[int, int, int, int] | None = Field(default=None, description="x, y, width, height of the change")
    url: str | None = Field(default=None, description="The new URL, when it changed")
    title: str | None = Field(default=None, description="The new title, when it changed")
    tab_opened: bool = False
    tabs: int = 1
    events: list[str] = Field(default=[], description="Page events: dialogs and how they were answered, downloads")
    downloads: list[DownloadedFile] = Field(default=[], description="Files downloaded by this action")
    value: str | None = Field(default=None, description="The field's value after typing (secrets redacted)")
    outcome: str = Field(default="ok", description="What the action itself reported")
    unchanged: bool = Field(default=False, description="Nothing changed at all (exit 3)")
    challenge: bool = Field(default=False, description="The page looks like a bot challenge (exit 5)")

    def line(self) -> str:
        """The receipt in one line."""
        parts = [self.action]
        if self.target:
            parts.append(f"on {self.target}")
        if self.point is not None:
            parts.append(f"at {self.point[0]:.0f},{self.point[1]:.0f}")
        if self.changed and self.box is not None:
            x, y, w, h = self.box
            parts.append(f"changed {self.changed:.1%} of the viewport in {x},{y} {w}x{h}")
        if self.url is not None:
            parts.append(f"url {self.url}")
        if self.title is not None:
            parts.append(f"title {self.title!r}")
        if self.tab_opened:
            parts.append(f"opened a tab ({self.tabs} tabs)")
        parts += self.events
        parts += [f"downloaded {d.name} ({d.bytes} bytes) to {d.path}" for d in self.downloads]
        if self.value is not None:
            parts.append(f"value {self.value!r}")
        if self.outcome not in ("ok", ""):
            parts.append(self.outcome)
        if self.unchanged:
            parts.append("nothing changed")
        if self.challenge:
            parts.append("the page looks like a bot challenge")
        return "; ".join(parts)


def changed_area(before: bytes, after: bytes) -> tuple[float, tuple[int, int, int, int] | None]:
    """The share of pixels that differ between two screenshots, and the box holding them."""
    a = Image.open(io.BytesIO(before)).convert("RGB")
    b = Image.open(io.BytesIO(after)).convert("RGB")
    if a.size != b.size:
        return 1.0, (0, 0, b.size[0], b.size[1])
    mask = ImageChops.difference(a, b).convert("L").point(lambda v: 255 if v > 8 else 0)
    box = mask.getbbox()
    if box is None:
        return 0.0, None
    count = mask.histogram()[255]
    share = count / (a.size[0] * a.size[1])
    return share, (box[0], box[1], box[2] - box[0], box[3] - box[1])


def looks_like_challenge(title: str, text: str) -> bool:
    return bool(_CHALLENGE.search(title) or _CHALLENGE.search(text[:2000]))
