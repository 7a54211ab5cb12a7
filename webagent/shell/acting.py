"""The actions of ``webagent session``: one action of webagent's action space each, on a ref or a
point, carried out by the loop's own ``perform`` through the session's driver (secrets typed and
masked by ``SecretPage``), and the receipt of what it did.

What a receipt reads of the page at the action's point (the control there, ``role "name"``; a
field's value or a checkbox's state) is read in whichever frame holds the point. A page's script
stops at a frame of another origin (its document is not the script's to read, and with site
isolation it lives in another renderer process), so the point is followed first, frame by frame,
through Playwright (``FarFrame.at``: frames of any origin, open shadow roots), and the script runs
in the innermost frame there on the point in that frame's viewport. The page's own frame is read
through the session's driver, as every other read of it is (a crashed page is told as one). A frame
that does not answer in time, or is gone (the action navigated it away), leaves that part of the
receipt out (logged), never the receipt; what is read is redacted as every receipt is."""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from ..actions import Action
from ..browser.deadline import within
from ..browser.farframes import FarFrame
from ..errors import BrowserError
from ..loop import perform
from ..records import Point
from .pageread import FRAMES_BUDGET, resolve
from .protocol import EXIT_BAD, EXIT_BLOCKED, EXIT_OK, EXIT_STALE, EXIT_UNCHANGED, Reply, ShellError
from .receipts import Before, Receipt, changed_area, looks_like_challenge
from .refs import RESOLVE_SCRIPT
from .sessions import ShellSession

__all__ = ["LATE_DOWNLOAD_S", "TARGET_SCRIPT", "VALUE_SCRIPT", "act", "locate", "read_at"]

log = structlog.get_logger("webagent.shell")

#: How long a receipt waits for a download an action started late.
LATE_DOWNLOAD_S = 1.5
#: The actions whose receipt tells the state of the checkbox, radio or switch they were on.
_TOGGLING = ("click_element", "double_click_element")


#: The control (or element) at a point of this document: ``role "name"`` (into open shadow roots;
#: the frames at the point are followed before it runs).
TARGET_SCRIPT = r"""([x, y]) => {
  let el = document.elementFromPoint(x, y);
  for (let depth = 0; el && el.shadowRoot && depth < 20; depth++) {
    const inner = el.shadowRoot.elementFromPoint(x, y);
    if (!inner || inner === el) break;
    el = inner;
  }
  if (!el) return null;
  const labelText = (label) => {  // its own words, not a select's options inside it
    const copy = label.cloneNode(true);
    for (const inner of copy.querySelectorAll('select,textarea,input,button')) inner.remove();
    return copy.textContent;
  };
  const c = el.closest('a[href],button,input,select,textarea,summary,label,[role],[onclick]') || el;
  const role = c.getAttribute('role') || ({A: 'link', BUTTON: 'button', SELECT: 'combobox', TEXTAREA: 'textbox',
    SUMMARY: 'button', LABEL: 'label'}[c.tagName] || (c.tagName === 'INPUT' ? (c.type === 'password' ? 'password' :
    ['button', 'submit', 'reset'].includes(c.type) ? 'button' : c.type === 'checkbox' || c.type === 'radio' ? c.type :
    'textbox') : c.tagName.toLowerCase()));
  const name = (c.getAttribute('aria-label') || (c.labels && c.labels[0] && labelText(c.labels[0])) ||
    (c.tagName === 'INPUT' ? (c.placeholder || c.name || c.value) : c.innerText) || c.title || '')
    .replace(/\s+/g, ' ').trim().slice(0, 60);
  return role + ' "' + name + '"';
}"""

#: ``[x, y, toggles]``: the value of the field at a point of this document (the one a label there
#: names; else the focused one), a password's as dots, a checkbox's or radio's as ``checked`` or
#: ``unchecked``; with ``toggles``, only a checkbox's, radio's or switch's state (null for anything else).
VALUE_SCRIPT = r"""([x, y, toggles]) => {
  const deep = (el, next) => {  // into open shadow roots
    for (let depth = 0; el && depth < 20; depth++) {
      const inner = el.shadowRoot ? next(el.shadowRoot) : null;
      if (!inner || inner === el) break;
      el = inner;
    }
    return el;
  };
  const FIELDS = ['INPUT', 'SELECT', 'TEXTAREA'];
  const fieldOf = (el) => {
    if (!el) return null;
    const label = el.closest('label');
    if (label && label.control && !FIELDS.includes(el.tagName)) return label.control;
    if (FIELDS.includes(el.tagName)) return el;
    const ticked = el.closest('[role=checkbox],[role=radio],[role=switch],[role=menuitemcheckbox]');
    if (ticked && ticked.hasAttribute('aria-checked')) return ticked;
    if (!el.isContentEditable) return null;
    while (el.parentElement && el.parentElement.isContentEditable) el = el.parentElement;
    return el;
  };
  let el = fieldOf(deep(document.elementFromPoint(x, y), (root) => root.elementFromPoint(x, y)));
  if (!el && !toggles) el = fieldOf(deep(document.activeElement, (root) => root.activeElement));
  if (!el) return null;
  const toggle = el.tagName === 'INPUT' && (el.type === 'checkbox' || el.type === 'radio');
  if (toggle) return el.checked ? 'checked' : 'unchecked';
  if (el.hasAttribute('aria-checked')) return el.getAttribute('aria-checked') === 'true' ? 'checked' : 'unchecked';
  if (toggles) return null;
  if (el.type === 'password') return el.value ? '•'.repeat(Math.min(el.value.length, 12)) : '';
  if (el.tagName === 'SELECT') return el.selectedOptions[0]?.text ?? '';
  if (el.isContentEditable) return el.innerText.slice(0, 500);
  return String(el.value).slice(0, 500);
}"""


async def locate(s: ShellSession, ref: str | None, point: list[Any] | None) -> Point | None:
    """The viewport point of a ref (found again, scrolled into view; ShellError 4 when it is gone
    or covered) or of ``x,y``; None without either."""
    if ref is not None:
        key = s.refs.key(ref)
        role, name = key.role, key.name
        if key.far:  # in a frame of another origin: found again through its frame
            found: object = await resolve(s, key)
        else:
            found = await s.driver.evaluate(RESOLVE_SCRIPT, [role, name, key.local])
        if not isinstance(found, dict) or not found.get("found"):
            raise ShellError(EXIT_STALE, f'stale ref {ref}: {role} "{name}" is no longer on the page; read it again')
        if found.get("covered"):
            covered = s.secrets.redact(str(found["covered"]))
            raise ShellError(EXIT_STALE, f'{ref} ({role} "{name}") is covered by {covered}')
        xy = (float(found["x"]), float(found["y"]))
        return Point(image=xy, viewport=xy)
    if point is not None:
        try:
            x, y = float(point[0]), float(point[1])
        except (TypeError, ValueError, IndexError):
            raise ShellError(EXIT_BAD, f"{point!r} is not a point: give x,y in CSS pixels") from None
        width, height = s.session.viewport
        if not (0 <= x < width and 0 <= y < height):
            raise ShellError(EXIT_BAD, f"point {x:g},{y:g} is outside the {width}x{height} viewport")
        return Point(image=(x, y), viewport=(x, y))
    return None


async def read_at(s: ShellSession, script: str, x: float, y: float, *extra: object) -> object:
    """``script`` run on ``[x', y', *extra]`` in the innermost frame at viewport point (x, y), where
    (x', y') is the point in that frame's viewport; None when that frame does not answer."""
    timeout_s = s.session.config.command_timeout_s
    try:
        frame, fx, fy = await FarFrame.main(s.session.page, timeout_s, total_s=FRAMES_BUDGET * timeout_s).at(x, y)
    except BrowserError as exc:  # the frames at the point not followed: the page's own read
        log.info("shell_point_frames_not_followed", error=s.secrets.redact(str(exc)))
        frame, fx, fy = None, x, y
    if frame is None or frame.is_main:
        return await s.driver.evaluate(script, [fx, fy, *extra])
    try:
        return await frame.evaluate(script, [fx, fy, *extra])
    except BrowserError as exc:
        log.info("shell_frame_not_read", error=s.secrets.redact(str(exc)))
        return None


async def _png(s: ShellSession) -> bytes:
    return await within(s.session.page.screenshot(type="png"), s.session.config.command_timeout_s, "page.screenshot")


async def _before(s: ShellSession) -> Before:
    s.driver.drain_events()  # what happened before this action is not its doing
    return Before(
        url=s.driver.url,
        title=await s.driver.title(),
        tabs=len(await s.driver.tabs()),
        downloads=len(s.session.downloads),
        png=await _png(s),
    )


async def _late_downloads(s: ShellSession, before: Before) -> None:
    """A download an action started after the page settled (a link's ``download``): waited for a moment,
    when nothing else shows, so that the receipt tells it."""
    for _ in range(round(LATE_DOWNLOAD_S / 0.1)):
        if len(s.session.downloads) != before.downloads:
            return
        await asyncio.sleep(0.1)


async def act(
    s: ShellSession,
    action: Action,
    point: Point | None,
    *,
    target: Point | None = None,
    typed: bool = False,
) -> Reply:
    """Carry out ``action`` at ``point`` and tell what it did (exit 3 when nothing changed)."""
    s.check_alive()
    under = None
    if point is not None:
        found = await read_at(s, TARGET_SCRIPT, *point.viewport)
        under = s.secrets.redact(found) if isinstance(found, str) else None
    before = await _before(s)
    uploads = s.agent.runtime.sessions.uploads(s.pilot.browser)
    outcome = await perform(s.driver, action, point, uploads, target)
    s.follow()
    receipt = Receipt(action=action.action, target=under, point=point.viewport if point else None, outcome=outcome)
    receipt.events = s.driver.drain_events()
    url, title = s.driver.url, await s.driver.title()
    receipt.url = url if url != before.url else None
    receipt.title = title if title != before.title else None
    tabs = await s.driver.tabs()
    receipt.tabs = max(1, len(tabs))  # one tab is listed as none
    receipt.tab_opened = len(tabs) > before.tabs
    receipt.changed, receipt.box = changed_area(before.png, await _png(s))
    if not (receipt.changed or receipt.url or receipt.tab_opened):
        await _late_downloads(s, before)  # a click that only downloads shows nothing else
        receipt.events += s.driver.drain_events()
    receipt.downloads = list(s.session.downloads[before.downloads :])
    if point is not None and (typed or action.action in _TOGGLING):  # a click tells a checkbox's state
        value = await read_at(s, VALUE_SCRIPT, *point.viewport, not typed)
        receipt.value = s.secrets.redact(value) if isinstance(value, str) else None
    receipt.unchanged = not (
        receipt.changed or receipt.url or receipt.title or receipt.tab_opened or receipt.events or receipt.downloads
    )
    text = await s.driver.page_text() if receipt.url or receipt.title else ""
    receipt.challenge = looks_like_challenge(title, text)
    await s.save_profile()
    code = EXIT_BLOCKED if receipt.challenge else EXIT_UNCHANGED if receipt.unchanged else EXIT_OK
    return Reply(code=code, text=s.secrets.redact(receipt.line()), data=receipt.model_dump(mode="json"))
