"""Key names as a model writes them (``ctrl+a``, ``ENTER``, ``page down``), in Playwright's syntax."""

from __future__ import annotations

__all__ = ["normalize_key"]

_KEY_ALIASES = {
    "enter": "Enter",
    "return": "Enter",
    "tab": "Tab",
    "esc": "Escape",
    "escape": "Escape",
    "space": "Space",
    "backspace": "Backspace",
    "delete": "Delete",
    "del": "Delete",
    "up": "ArrowUp",
    "down": "ArrowDown",
    "left": "ArrowLeft",
    "right": "ArrowRight",
    "arrowup": "ArrowUp",
    "arrowdown": "ArrowDown",
    "arrowleft": "ArrowLeft",
    "arrowright": "ArrowRight",
    "pageup": "PageUp",
    "pagedown": "PageDown",
    "home": "Home",
    "end": "End",
    "ctrl": "Control",
    "control": "Control",
    "cmd": "Meta",
    "command": "Meta",
    "meta": "Meta",
    "win": "Meta",
    "alt": "Alt",
    "option": "Alt",
    "shift": "Shift",
}


def normalize_key(key: str) -> str:
    """Turn a model's key name (``ctrl+a``, ``ENTER``, ``page down``, ``ctrl++``) into Playwright's syntax."""
    text = key.strip()
    if not text:
        return key
    plus_key = text.endswith("+") and (text == "+" or text[:-1].rstrip().endswith("+"))
    if plus_key:
        text = text[:-1].rstrip()[:-1] if text != "+" else ""
    parts = [p.strip() for p in text.split("+") if p.strip()]
    out = [_normalize_part(p) for p in parts]
    if plus_key:
        out.append("+")
    return "+".join(out) or key


def _normalize_part(part: str) -> str:
    alias = _KEY_ALIASES.get(part.lower().replace(" ", "").replace("_", ""))
    if alias:
        return alias
    if len(part) == 1:
        return part
    if part[0] in "fF" and part[1:].isdigit():
        return part.upper()
    return part[0].upper() + part[1:]
