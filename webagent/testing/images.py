"""Image facts the offline model server needs, read from a ``data:`` URL's first bytes only.

The server counts image tokens from each screenshot's pixel size, the way a VLM server does; it
never needs the pixels. Reading the size from the JPEG or PNG header (and, without a request log,
JSON-parsing only the start of each image's base64) keeps its CPU small: in benchmarks it shares
the cores with the agent being measured.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from io import BytesIO

from PIL import Image

__all__ = ["IMAGE_HEAD_CHARS", "image_digests", "image_size", "shrink_images"]


def image_size(url: str) -> tuple[int, int] | None:
    """Pixel size of a base64 ``data:`` image URL, decoding only the header when possible."""
    comma = url.find(",", 0, 256)
    if comma < 0 or not url.startswith("data:") or ";base64" not in url[:comma]:
        return None
    payload = url[comma + 1 : comma + 1 + 65536]  # not a copy of the whole image
    for chunk in (payload[:4096], payload):  # a JPEG's or PNG's size is near its start
        try:
            data = base64.b64decode(chunk[: len(chunk) // 4 * 4])
        except ValueError:
            continue
        size = _header_size(data)
        if size is not None:
            return size
    try:  # a format the header reader does not know, or a size marker further in
        with Image.open(BytesIO(base64.b64decode(url[comma + 1 :]))) as im:
            return im.size
    except (OSError, ValueError):
        return None


#: Base64 characters of each image a server that keeps no request log reads (see shrink_images).
IMAGE_HEAD_CHARS = 16384


def shrink_images(raw: bytes) -> bytes:
    """The request body with every base64 ``data:image/`` URL cut to its first characters.

    JSON-parsing ~80 kB of base64 per screenshot was most of this server's CPU, which in
    benchmarks shares the cores with the agent measured; the image size is read from the header
    kept here. Only for a server that keeps no request log (the log records image digests).
    """
    parts: list[bytes] = []
    start = 0
    for payload, end in _image_urls(raw):
        parts.append(raw[start : min(end, payload + IMAGE_HEAD_CHARS)])
        start = end
    parts.append(raw[start:])
    return b"".join(parts)


def image_digests(raw: bytes) -> list[str]:
    """The SHA-256 of each base64 ``data:image/`` URL's payload in a request body, in order (what
    the simulated prefix cache binds an image's tokens to), without parsing the JSON."""
    view = memoryview(raw)
    return [hashlib.sha256(view[payload:end]).hexdigest() for payload, end in _image_urls(raw)]


def _image_urls(raw: bytes) -> Iterator[tuple[int, int]]:
    """``(payload start, end)`` of each ``data:image/`` URL of a JSON body, in order."""
    start = 0
    while (i := raw.find(b'"data:image/', start)) >= 0 and (end := raw.find(b'"', i + 1)) >= 0:
        comma = raw.find(b",", i, min(end, i + 256))
        if comma > 0 and raw[i - 1 : i] != b"\\":  # after an escaped quote it is text, not a URL
            yield comma + 1, end
        start = end


def _header_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG's IHDR or a baseline/progressive JPEG's SOF marker (no decoding)."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # start of frame
            return int.from_bytes(data[i + 7 : i + 9], "big"), int.from_bytes(data[i + 5 : i + 7], "big")
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None
