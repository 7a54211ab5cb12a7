"""The page's controls and text for ``snap``, ``text`` and ``find``, frames of other origins included,
and a ref found again in whichever frame holds it.

``READ_SCRIPT`` reads the page's own document, its open shadow roots and the frames of its origin;
a frame of another origin (out of process, its document not the page's to read) is read by the same
script through its own Playwright frame (``webagent.browser.farframes``), its points moved by where
its content box is in the page, its controls and text put where the frame is, in document order.
Each call into such a frame has the session's command deadline, and all of them of one read twice
that; a frame that does not answer in time or is gone is left out of the read (logged), never the
read's failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import structlog

from ..browser.farframes import FarFrame
from ..errors import BrowserError
from .protocol import EXIT_BAD, ShellError
from .refs import COVER_SCRIPT, FAR_SCRIPT, READ_SCRIPT, RESOLVE_SCRIPT, Control, RefKey
from .sessions import ShellSession

__all__ = ["FRAMES_BUDGET", "MAX_DEPTH", "Owner", "PageRead", "read_page", "resolve"]

log = structlog.get_logger("webagent.shell")

#: Frames of other origins nested deeper than this are not read.
MAX_DEPTH = 4
#: The frames of other origins of one read take at most this many command deadlines in all (the
#: frames not read by then are left out).
FRAMES_BUDGET = 2
_MARK = re.compile("\u0001([0-9]+)\u0001|\u0002([0-9]+)\u0002")
_CONTROL_MARK = re.compile("\u0001([0-9]+)\u0001")


@dataclass(frozen=True, slots=True)
class Owner:
    """Where a control was read: a frame of another origin (None: the page's own read) and its rank
    among the controls of its role and name in that read."""

    frame: FarFrame | None
    local: int


@dataclass
class PageRead:
    """The controls in document order (viewport points), where each was read, and the text with
    ``\\u0001N\\u0001`` where control N is."""

    controls: list[Control]
    owners: list[Owner]
    text: str


async def read_page(s: ShellSession, with_text: bool) -> PageRead:
    """The page's controls (and text), through its frames of other origins."""
    found = await s.driver.evaluate(READ_SCRIPT, with_text)
    if not isinstance(found, dict):
        raise ShellError(EXIT_BAD, "the page could not be read")
    timeout_s = s.session.config.command_timeout_s
    main = FarFrame.main(s.session.page, timeout_s, total_s=FRAMES_BUDGET * timeout_s)
    return await _expand(main, found, with_text, 0, (0.0, 0.0), own=True)


async def _expand(
    frame: FarFrame, found: dict[str, object], with_text: bool, depth: int, at: tuple[float, float], *, own: bool
) -> PageRead:
    """One frame's read with the reads of the frames of other origins in it put in place."""
    rows = found.get("controls")
    controls = [Control.model_validate(c) for c in rows] if isinstance(rows, list) else []
    for c in controls:
        c.x, c.y = c.x + at[0], c.y + at[1]
    counts: dict[tuple[str, str], int] = {}
    owners = []
    for c in controls:
        owners.append(Owner(None if own else frame, counts.get((c.role, c.name), 0)))
        counts[(c.role, c.name)] = counts.get((c.role, c.name), 0) + 1
    far = found.get("far")
    inner = await _inner(frame, far if isinstance(far, list) else [], with_text, depth, at)
    # Splice: the frames' controls after the ``at`` controls before them, the text renumbered.
    merged: list[Control] = []
    merged_owners: list[Owner] = []
    own_index: dict[int, int] = {}
    bases: dict[int, int] = {}
    done = 0
    for k, (place, read) in enumerate(inner):
        for i in range(done, min(place, len(controls))):
            own_index[i] = len(merged)
            merged.append(controls[i])
            merged_owners.append(owners[i])
        done = max(done, min(place, len(controls)))
        if read is not None:
            bases[k] = len(merged)
            merged += read.controls
            merged_owners += read.owners
    for i in range(done, len(controls)):
        own_index[i] = len(merged)
        merged.append(controls[i])
        merged_owners.append(owners[i])
    reads = dict(enumerate(read for _, read in inner))

    def mark(match: re.Match[str]) -> str:
        if match.group(1) is not None:
            i = own_index.get(int(match.group(1)))
            return f"\u0001{i}\u0001" if i is not None else ""
        k = int(match.group(2))
        read = reads.get(k)
        if read is None:
            return ""
        return _CONTROL_MARK.sub(lambda m: f"\u0001{int(m.group(1)) + bases[k]}\u0001", read.text)

    text = _MARK.sub(mark, str(found.get("text", ""))) if with_text else ""
    return PageRead(merged, merged_owners, text)


async def _inner(
    frame: FarFrame, far: list[object], with_text: bool, depth: int, at: tuple[float, float]
) -> list[tuple[int, PageRead | None]]:
    """The reads of the frames of other origins in ``frame`` (None for one left out), each with how
    many of ``frame``'s controls come before it."""
    if not far:
        return []
    places = [int(f.get("at", 0)) if isinstance(f, dict) else 0 for f in far]
    if depth >= MAX_DEPTH:
        return [(place, None) for place in places]
    try:
        children = await frame.children(FAR_SCRIPT)
    except BrowserError as exc:
        log.info("shell_frames_not_read", error=str(exc))
        return [(place, None) for place in places]
    if len(children) != len(far):  # the page changed between the two reads: read it again later
        log.info("shell_frames_not_read", error="the page's frames changed while it was read")
        return [(place, None) for place in places]
    out: list[tuple[int, PageRead | None]] = []
    for place, info, child in zip(places, far, children, strict=True):
        corner = info.get("corner") if isinstance(info, dict) else None
        if child is None or not isinstance(corner, list) or len(corner) != 2:
            out.append((place, None))
            continue
        try:
            found = await child.evaluate(READ_SCRIPT, with_text)
        except BrowserError as exc:  # one frame that does not answer is left out, not the page
            log.info("shell_frame_not_read", error=str(exc))
            out.append((place, None))
            continue
        if not isinstance(found, dict):
            out.append((place, None))
            continue
        inner_at = (at[0] + float(corner[0]), at[1] + float(corner[1]))
        out.append((place, await _expand(child, found, with_text, depth + 1, inner_at, own=False)))
    return out


async def resolve(s: ShellSession, key: RefKey) -> dict[str, object] | None:
    """A control read in a frame of another origin, found again: ``{found, x, y, covered}`` (its
    point in the page's viewport, scrolled into view: in its frame, then its frame in the page);
    None when it is gone. A frame that does not answer is a BrowserError, its text redacted (the
    frame is called directly, not through the session's ``SecretPage``)."""
    try:
        return await _resolve(s, key)
    except BrowserError as exc:
        clean = s.secrets.redact(str(exc))
        if clean == str(exc):
            raise
        raise type(exc)(clean) from None


async def _resolve(s: ShellSession, key: RefKey) -> dict[str, object] | None:
    read = await read_page(s, False)
    same = [i for i, c in enumerate(read.controls) if (c.role, c.name) == (key.role, key.name)]
    if key.nth >= len(same):
        return None
    owner = read.owners[same[key.nth]]
    if owner.frame is None:  # the frames moved: it is in the page's own read now
        found = await s.driver.evaluate(RESOLVE_SCRIPT, [key.role, key.name, owner.local])
        return found if isinstance(found, dict) else None
    frame = owner.frame
    found = await frame.evaluate(RESOLVE_SCRIPT, [key.role, key.name, owner.local])
    if not isinstance(found, dict) or not found.get("found"):
        return None
    corner = await frame.corner(into_view=True)
    if corner is None:
        return None
    x, y = corner[0] + float(found["x"]), corner[1] + float(found["y"])
    covered = found.get("covered") or await frame.in_parent(COVER_SCRIPT, x, y)
    return {"found": True, "x": x, "y": y, "covered": covered}
