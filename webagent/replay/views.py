"""What a recording holds and when a step of it may be replayed: the fingerprint of a page state
(``fingerprint``: its URL, title, a hash of its text, a perceptual hash of its screenshot) and
whether two are the same view (``same_view``), the recorded step and answer (``CachedStep``,
``CachedAnswer``), and the steps the cache never replays (``sensitive``)."""

from __future__ import annotations

import hashlib
import io
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field

from ..actions import Action, AskUser, Goto, UploadFile, WriteElement, points_of
from ..errors import WebAgentError
from ..guard.urls import normalize_url
from ..images import Screenshot
from ..records import Acted, Fingerprint, Point, Verdict

__all__ = [
    "IMAGE_TOLERANCE_BITS",
    "CachedAnswer",
    "CachedStep",
    "fingerprint",
    "image_hash",
    "origin_of",
    "relative_url",
    "same_view",
    "sensitive",
    "text_hash",
]

#: Differing bits (of 256) two screenshots' dHashes may have and still count as the same view:
#: absorbs a blinking caret or JPEG noise, not a moved button or a changed line of text.
IMAGE_TOLERANCE_BITS = 6
_HASH_W, _HASH_H = 17, 16
#: ``{{NAME}}`` in a text typed: a secret (``webagent.guard.secrets``).
_PLACEHOLDER = re.compile(r"\{\{\s*[A-Za-z_][A-Za-z0-9_]*\s*\}\}")


def text_hash(text: str) -> str:
    """Hash of page text with whitespace normalised (16 hex digits)."""
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()[:16]


def image_hash(shot: Screenshot) -> str:
    """256-bit difference hash of a screenshot: grayscale 17x16, one bit per horizontal gradient."""
    from PIL import Image

    with Image.open(io.BytesIO(shot.data())) as img:
        small = img.convert("L").resize((_HASH_W, _HASH_H), Image.Resampling.BILINEAR)
        px = small.tobytes()
    bits = 0
    for row in range(_HASH_H):
        base = row * _HASH_W
        for col in range(_HASH_W - 1):
            bits = (bits << 1) | (px[base + col] > px[base + col + 1])
    return f"{bits:064x}"


def fingerprint(url: str, title: str, page_text: str, shot: Screenshot, *, start_url: str = "") -> Fingerprint:
    """The fingerprint of an observation; a URL on the start URL's origin is kept as its path."""
    return Fingerprint(
        url=relative_url(url, start_url),
        title=title,
        text=text_hash(page_text),
        image=image_hash(shot),
        size=(shot.frame.image_width, shot.frame.image_height),
    )


def relative_url(url: str, start_url: str) -> str:
    """``url`` without scheme and host when it shares ``start_url``'s origin (so ports may change)."""
    a, b = urlsplit(url), urlsplit(start_url)
    if a.scheme in ("http", "https") and (a.scheme, a.netloc) == (b.scheme, b.netloc):
        return urlunsplit(("", "", a.path or "/", a.query, a.fragment))
    return url


def origin_of(url: str) -> str:
    """``scheme://host:port`` of an http(s) URL (the port written out), else the URL itself: what a
    recording is bound to."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return url
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return url
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}"


def sensitive(step: CachedStep, origin: str, *, max_actions: int = 1) -> str | None:
    """Why a recorded step is the policy's to decide, never the cache's (None: it may be replayed):
    it was taken on a page of another origin than the run's start, one of its actions (a turn may
    carry several) opens one, types a secret, uploads a file or asks a person, or it carries more
    actions than the run lets one turn take (``max_actions``, ``[agent] max_actions_per_turn``)."""
    if "://" in step.fingerprint.url:  # a page off the start origin (same-origin URLs are kept as paths)
        return "it was recorded on a page of another origin"
    actions = step.actions
    if len(actions) > max_actions:
        return f"it carries {len(actions)} actions, more than the {max_actions} a turn this run allows"
    for action in actions:
        why = _sensitive_action(action, origin)
        if why is not None:
            return why
    return None


def _sensitive_action(action: Action, origin: str) -> str | None:
    if isinstance(action, Goto):
        try:
            target = normalize_url(action.url)
        except WebAgentError:
            return "it opens a URL that is not valid"
        if origin_of(target) != origin:
            return "it leaves the start origin"
    if isinstance(action, WriteElement) and _PLACEHOLDER.search(action.content):
        return "it types a secret"
    if isinstance(action, UploadFile):
        return "it uploads a file"
    if isinstance(action, AskUser):
        return "it asks a person"
    return None


def same_view(a: Fingerprint, b: Fingerprint) -> bool:
    """Whether two observations are the same page state."""
    if (a.url, a.title, a.text, a.size) != (b.url, b.title, b.text, b.size):  # another viewport: other points
        return False
    try:
        return (int(a.image, 16) ^ int(b.image, 16)).bit_count() <= IMAGE_TOLERANCE_BITS
    except ValueError:
        return False


class CachedStep(BaseModel):
    """One recorded step."""

    model_config = ConfigDict(extra="forbid")

    fingerprint: Fingerprint
    action: Action
    point: Point | None = None
    target_point: Point | None = None
    more: list[Acted] = Field(default_factory=list, description="The step's further actions (several a turn)")
    note: str = ""
    verdict: Verdict | None = None

    @property
    def actions(self) -> list[Action]:
        """The step's actions in order: ``action``, then those of ``more``."""
        return [self.action, *(a.action for a in self.more)]

    @property
    def calls(self) -> int:
        """Model calls its replay saves: the policy's and, with a localizer, one per point (a
        replayed answer is judged again by the validator)."""
        return 1 + sum(points_of(a) for a in self.actions)


class CachedAnswer(BaseModel):
    """The answer to a check or an extraction on one page state."""

    model_config = ConfigDict(extra="forbid")

    fingerprint: Fingerprint
    value: Any = Field(description="The answer as JSON: a check's verdict, an extraction's validated value")
    origin: str | None = Field(default=None, description="The origin of the page it was given on (scheme://host:port)")
