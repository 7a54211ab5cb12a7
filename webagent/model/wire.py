"""The request body on the wire: JSON built once per request, screenshots spliced in as they are.

A screenshot's ``data:`` URL (base64 from the browser) needs no JSON escaping, so it goes into
the body verbatim instead of being scanned by a JSON encoder for every request that carries it
(the policy sends each screenshot up to K times). Everything else is encoded by ``json.dumps``.
"""

from __future__ import annotations

import json
from typing import Any

from ..images import DataURL

__all__ = ["DataURL", "encode_chat_body"]  # DataURL (webagent.images): what the encoder splices in unescaped

# Values sent unchanged with every request of a role, encoded once: the system prompt (a few kB of
# guidelines and schema), keyed by value, and the schema fields (``response_format``,
# ``structured_outputs``, ``tools``), keyed by identity: the roles build each one once and never
# mutate it.
_CONSTANT_KEYS = frozenset({"response_format", "structured_outputs", "tools"})
_CACHE_LIMIT = 64
_texts: dict[str, bytes] = {}
_values: dict[int, tuple[object, bytes]] = {}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _utf8(value: Any) -> bytes:
    """``_dumps(value)`` in UTF-8. A lone surrogate (a page's title or text can hold one: JavaScript
    strings are UTF-16) cannot be UTF-8; it can only stand inside a JSON string here, where
    ``backslashreplace`` writes it as the ``\\udXXX`` escape ``json.dumps`` would."""
    return _dumps(value).encode("utf-8", "backslashreplace")


def _constant_text(text: str) -> bytes:
    encoded = _texts.get(text)
    if encoded is None:
        if len(_texts) >= _CACHE_LIMIT:
            _texts.clear()
        encoded = _texts[text] = _utf8(text)
    return encoded


def _constant_value(value: Any) -> bytes:
    if not isinstance(value, dict | list):
        return _utf8(value)
    hit = _values.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    if len(_values) >= _CACHE_LIMIT:
        _values.clear()
    encoded = _utf8(value)
    _values[id(value)] = (value, encoded)  # holding the value keeps its id from being reused
    return encoded


def encode_chat_body(body: dict[str, Any]) -> bytes:
    """``json.dumps(body)`` as bytes, without re-scanning the screenshots.

    The pieces are encoded to bytes one by one and joined once, so a screenshot's ~200 kB are
    copied twice (its ASCII encode, the join) whatever the nesting, and an ASCII screenshot never
    shares a ``str`` with non-ASCII text (which would widen the whole body to 2-4 bytes a character).
    """
    out: list[bytes] = [b'{"messages":[']
    for n, message in enumerate(body.get("messages", ())):
        if n:
            out.append(b",")
        _message(message, out)
    out.append(b"]")
    for key, value in body.items():
        if key != "messages":
            encoded = _constant_value(value) if key in _CONSTANT_KEYS else _utf8(value)
            out += (b",", _utf8(key), b":", encoded)
    out.append(b"}")
    return b"".join(out)


def _message(message: dict[str, Any], out: list[bytes]) -> None:
    content = message.get("content")
    if isinstance(content, str) and message.get("role") == "system" and len(message) == 2:
        out += (b'{"role":"system","content":', _constant_text(content), b"}")
        return
    if not isinstance(content, list):
        out.append(_utf8(message))
        return
    others = {k: v for k, v in message.items() if k != "content"}
    out += (_utf8(others)[:-1], b',"content":[' if others else b'"content":[')
    for n, part in enumerate(content):
        if n:
            out.append(b",")
        _part(part, out)
    out.append(b"]}")


def _part(part: Any, out: list[bytes]) -> None:
    if isinstance(part, dict) and part.get("type") == "image_url":
        image = part.get("image_url")
        if isinstance(image, dict) and isinstance(image.get("url"), DataURL) and len(image) == 1:
            url: str = image["url"]
            if len(part) == 2:
                out += (b'{"type":"image_url","image_url":{"url":"', url.encode("ascii"), b'"}}')
                return
            if len(part) == 3 and isinstance(part.get("uuid"), str):  # vLLM's stable image id
                out += (
                    b'{"type":"image_url","image_url":{"url":"',
                    url.encode("ascii"),
                    b'"},"uuid":',
                    _utf8(part["uuid"]),
                    b"}",
                )
                return
    out.append(_utf8(part))
