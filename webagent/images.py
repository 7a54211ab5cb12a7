"""Image sizing and coordinate mapping, as pure functions.

A screenshot sent to a model covers the top-left region of the viewport at one uniform scale
``s``; the region is chosen so that the image has exactly the size the model's processor wants
(``smart_resize``), which means the server never resizes it again and the model's coordinates
are in the pixels we sent. ``Frame`` records that mapping; ``Frame.to_css`` turns image pixels
back into viewport CSS pixels.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from dataclasses import dataclass
from functools import cached_property

__all__ = ["DataURL", "Frame", "ResizeRule", "Screenshot", "frame_for", "smart_resize"]

_HEAD = re.compile(r"data:[a-z]+/[a-z0-9.+-]+;base64,")


# Every character JSON would escape (quote, backslash, controls) is outside this set: a payload
# made only of these needs no escaping. Standard and URL-safe base64, padding included.
_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_"


class DataURL(str):
    """A ``data:`` URL whose characters need no JSON escaping (checked once, when made)."""

    __slots__ = ()

    def __new__(cls, value: str) -> DataURL:
        # The header is checked by the pattern; the payload (often 100+ kB) by one C-speed pass
        # that deletes every base64 character: anything left would need escaping (or is not
        # base64). ``isascii`` is O(1) and makes the ASCII encode a plain copy.
        comma = value.find(",", 0, 64)
        if (
            comma < 0
            or not _HEAD.fullmatch(value, 0, comma + 1)
            or not value.isascii()
            or value[comma + 1 :].encode("ascii").translate(None, _BASE64)
        ):
            raise ValueError("not a base64 data: URL")
        return super().__new__(cls, value)


@dataclass(frozen=True, slots=True)
class ResizeRule:
    """Qwen-VL style resize parameters: sides are multiples of ``factor``, area within bounds."""

    factor: int
    min_pixels: int
    max_pixels: int


def smart_resize(height: int, width: int, rule: ResizeRule) -> tuple[int, int]:
    """Return ``(height, width)`` as Qwen2.5-VL / Qwen3-VL image processors compute it.

    Both sides become multiples of ``rule.factor`` close to the original, keeping the aspect
    ratio, with ``min_pixels <= h * w <= max_pixels``.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    factor = rule.factor
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"aspect ratio of {width}x{height} is above 200")
    h_bar = max(factor, _round_by(height, factor))
    w_bar = max(factor, _round_by(width, factor))
    if h_bar * w_bar > rule.max_pixels:
        beta = math.sqrt((height * width) / rule.max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < rule.min_pixels:
        beta = math.sqrt(rule.min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _round_by(value: int, factor: int) -> int:
    # Python's round() is round-half-even, which is what the reference processors use.
    return round(value / factor) * factor


@dataclass(frozen=True, slots=True)
class Frame:
    """How one screenshot maps onto the viewport.

    The image (``image_width`` x ``image_height`` pixels) shows the viewport region
    ``[0, css_width) x [0, css_height)`` in CSS pixels, scaled uniformly by ``scale``.
    """

    viewport_width: int
    viewport_height: int
    image_width: int
    image_height: int

    @property
    def scale(self) -> float:
        return max(self.image_width / self.viewport_width, self.image_height / self.viewport_height)

    @property
    def css_width(self) -> float:
        return self.image_width / self.scale

    @property
    def css_height(self) -> float:
        return self.image_height / self.scale

    @property
    def is_identity(self) -> bool:
        return (self.image_width, self.image_height) == (self.viewport_width, self.viewport_height)

    def contains(self, x: float, y: float) -> bool:
        """Whether an image point lies on the image."""
        return 0 <= x < self.image_width and 0 <= y < self.image_height

    def to_css(self, x: float, y: float) -> tuple[float, float]:
        """Image pixels -> viewport CSS pixels (exact, no rounding)."""
        s = self.scale
        return x / s, y / s

    def to_image(self, x: float, y: float) -> tuple[float, float]:
        """Viewport CSS pixels -> image pixels (exact, no rounding)."""
        s = self.scale
        return x * s, y * s


def frame_for(viewport_width: int, viewport_height: int, rule: ResizeRule | None) -> Frame:
    """The frame a screenshot of this viewport gets under ``rule`` (None: native size).

    The image size is ``smart_resize`` of the viewport, except that we never upscale: where
    smart_resize would round a side up past the viewport, both sides are floored to multiples of
    the factor instead. Any size whose sides are multiples of the factor and whose area is within
    bounds is a fixed point of smart_resize, so the server keeps the image exactly as sent.
    """
    if rule is None:
        return Frame(viewport_width, viewport_height, viewport_width, viewport_height)
    h, w = smart_resize(viewport_height, viewport_width, rule)
    if h > viewport_height or w > viewport_width:
        fh = viewport_height // rule.factor * rule.factor
        fw = viewport_width // rule.factor * rule.factor
        if fh > 0 and fw > 0 and smart_resize(fh, fw, rule) == (fh, fw):
            h, w = fh, fw
    return Frame(viewport_width, viewport_height, w, h)


@dataclass(frozen=True)
class Screenshot:
    """One encoded screenshot: base64 as the browser returned it (encoded once) and its frame."""

    b64: str
    mime: str
    frame: Frame

    @cached_property
    def data_url(self) -> str:
        """The ``data:`` URL, built once; it goes into request bodies without re-encoding."""
        return DataURL(f"data:{self.mime};base64,{self.b64}")

    @property
    def extension(self) -> str:
        return "png" if self.mime == "image/png" else "jpg"

    def data(self) -> bytes:
        return base64.b64decode(self.b64)

    @cached_property
    def uuid(self) -> str:
        """A stable id of the image's content (the SHA-256 of its base64, 32 hex digits), computed once."""
        return hashlib.sha256(self.b64.encode("ascii")).hexdigest()[:32]

    def image_part(self, *, uuid: bool = False) -> dict[str, object]:
        """An OpenAI ``image_url`` content part (``uuid``: with the image's stable id, which vLLM
        0.10.2+ uses as the image's cache key instead of hashing its content)."""
        part: dict[str, object] = {"type": "image_url", "image_url": {"url": self.data_url}}
        if uuid:
            part["uuid"] = self.uuid
        return part
