"""Refs (``@e12``): the page's controls numbered in document order, read by one script, and a ref
found again before it is used.

A ref names a control by its role, its name and which of the controls with both it is; before an
action the script finds that control again, scrolls it into view, and says whether something else
covers its centre. A control that is gone is a stale ref (exit 4), as is a covered one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from .protocol import EXIT_BAD, ShellError

__all__ = ["COVER_SCRIPT", "FAR_SCRIPT", "READ_SCRIPT", "RESOLVE_SCRIPT", "Control", "RefKey", "RefTable", "parse_ref"]

_REF = re.compile(r"^@?e([1-9][0-9]{0,5})$")

# The controls, in document order: what a click, typing or a scroll can use.
_CONTROLS = r"""
const SEL = 'a[href],button,input:not([type=hidden]),select,textarea,summary,[role=button],[role=link],' +
  '[role=menuitem],[role=tab],[role=checkbox],[role=radio],[role=option],[role=switch],[role=textbox],' +
  '[role=combobox],[onclick],[contenteditable=true]';
// A panel that scrolls on its own (overflow auto/scroll with more content than it shows): a scroll target.
const scrolls = (el) => {
  if (el === document.body || el === document.documentElement) return false;
  const down = el.scrollHeight > el.clientHeight + 1, across = el.scrollWidth > el.clientWidth + 1;
  if (!down && !across) return false;
  const st = getComputedStyle(el);
  const free = (o) => o === 'auto' || o === 'scroll' || o === 'overlay';
  return (down && free(st.overflowY)) || (across && free(st.overflowX));
};
const visible = (el) => {
  const r = el.getBoundingClientRect();
  if (r.width < 1 || r.height < 1) return false;
  if (el.checkVisibility && !el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) return false;
  return true;
};
const clean = (s) => (s || '').replace(/\s+/g, ' ').trim().slice(0, 80);
const roleOf = (el) => {
  const explicit = el.getAttribute('role');
  if (explicit) return explicit;
  const tag = el.tagName.toLowerCase();
  if (tag === 'a') return 'link';
  if (tag === 'button' || tag === 'summary') return 'button';
  if (tag === 'select') return 'combobox';
  if (tag === 'textarea') return 'textbox';
  if (tag === 'input') {
    const t = (el.getAttribute('type') || 'text').toLowerCase();
    if (['button', 'submit', 'reset', 'image'].includes(t)) return 'button';
    if (t === 'checkbox' || t === 'radio') return t;
    if (t === 'file') return 'file';
    if (t === 'password') return 'password';
    return 'textbox';
  }
  if (el.isContentEditable) return 'textbox';
  return el.matches(SEL) ? 'clickable' : 'scrollable';
};
// A label's own words: not the options of a select inside it, nor a field's text.
const labelText = (label) => {
  const copy = label.cloneNode(true);
  for (const inner of copy.querySelectorAll('select,textarea,input,button')) inner.remove();
  return copy.textContent;
};
const nameOf = (el) => {
  const label = el.getAttribute('aria-label');
  if (label) return clean(label);
  const by = el.getAttribute('aria-labelledby');
  const home = el.getRootNode().getElementById ? el.getRootNode() : document;
  if (by) return clean(by.split(/\s+/).map((id) => home.getElementById(id)?.innerText || '').join(' '));
  if (el.labels && el.labels.length) return clean(labelText(el.labels[0]));
  const tag = el.tagName.toLowerCase();
  if (tag === 'input' && ['button', 'submit', 'reset'].includes((el.type || '').toLowerCase())) return clean(el.value);
  if (tag === 'input' || tag === 'textarea') return clean(el.getAttribute('placeholder') || el.getAttribute('name') || el.title);
  if (tag === 'select') return clean(el.getAttribute('name') || el.title);
  return clean(el.innerText || el.getAttribute('title') || el.getAttribute('alt') ||
    el.querySelector('img[alt]')?.getAttribute('alt'));
};
const valueOf = (el) => {
  const tag = el.tagName.toLowerCase();
  if (tag === 'select') return clean(el.selectedOptions[0]?.text);
  if (tag === 'textarea') return el.value.slice(0, 200);
  if (tag === 'input') {
    const t = (el.type || '').toLowerCase();
    if (t === 'password') return el.value ? '••••' : '';
    if (t === 'checkbox' || t === 'radio') return el.checked ? 'checked' : 'unchecked';
    if (['button', 'submit', 'reset', 'image', 'file'].includes(t)) return null;
    return el.value.slice(0, 200);
  }
  return null;
};
// A same-origin frame's document (null for a cross-origin one).
const frameDoc = (el) => {
  if (el.tagName !== 'IFRAME' && el.tagName !== 'FRAME') return null;
  try { return el.contentDocument; } catch (e) { return null; }
};
// Every element, in document order, with those of open shadow roots and same-origin frames.
const everything = () => {
  const out = [];
  const visit = (root) => {
    for (const el of root.querySelectorAll('*')) {
      out.push(el);
      if (el.shadowRoot) visit(el.shadowRoot);
      const doc = frameDoc(el);
      if (doc && doc.body) visit(doc.body);
    }
  };
  if (document.body) visit(document.body);
  return out;
};
// Where a frame element's content box (its document's viewport) starts inside its border box.
const insetOf = (f) => {
  const s = getComputedStyle(f);
  return [f.clientLeft + parseFloat(s.paddingLeft), f.clientTop + parseFloat(s.paddingTop)];
};
// Where an element's frame is in the top viewport.
const offsetOf = (el) => {
  let dx = 0, dy = 0, win = el.ownerDocument.defaultView;
  while (win && win !== window && win.frameElement) {
    const f = win.frameElement, r = f.getBoundingClientRect(), [ix, iy] = insetOf(f);
    dx += r.left + ix; dy += r.top + iy;
    win = win.parent;
  }
  return [dx, dy];
};
// The innermost element at a viewport point, through open shadow roots and same-origin frames.
const deepAt = (x, y) => {
  let top = document.elementFromPoint(x, y);
  for (let depth = 0; top && depth < 20; depth++) {
    if (top.shadowRoot) {
      const inner = top.shadowRoot.elementFromPoint(x, y);
      if (inner && inner !== top) { top = inner; continue; }
    }
    const doc = frameDoc(top);
    if (doc) {
      const r = top.getBoundingClientRect(), [ix, iy] = insetOf(top);
      x -= r.left + ix; y -= r.top + iy;
      const inner = doc.elementFromPoint(x, y);
      if (inner) { top = inner; continue; }
    }
    break;
  }
  return top;
};
// Whether node is inside el (across shadow roots).
const inside = (el, node) => {
  for (let n = node; n; n = n.parentNode || n.host) if (n === el) return true;
  return false;
};
const controls = (all) => {
  const found = [];
  const seen = new Set();
  for (const el of all || everything()) {
    if (!(el.matches(SEL) || scrolls(el)) || !visible(el)) continue;
    if (el.closest('a[href],button') !== el && el.parentElement?.closest('a[href],button')) continue;
    seen.add(el);
    found.push(el);
  }
  return found;
};
// A frame element whose document this script cannot enter (another origin): read through its own frame.
const isFar = (el) => (el.tagName === 'IFRAME' || el.tagName === 'FRAME') && !frameDoc(el) && visible(el);
// Where its content box starts in this document's viewport.
const cornerOf = (el) => {
  const r = el.getBoundingClientRect(), [ix, iy] = insetOf(el), [dx, dy] = offsetOf(el);
  return [dx + r.left + ix, dy + r.top + iy];
};
const describe = (el) => {
  const r = el.getBoundingClientRect();
  const [dx, dy] = offsetOf(el);
  return {role: roleOf(el), name: nameOf(el), value: valueOf(el),
          x: Math.round(dx + r.left + r.width / 2), y: Math.round(dy + r.top + r.height / 2),
          w: Math.round(r.width), h: Math.round(r.height)};
};
"""

#: ``{controls: [...], text: "...", far: [...]}``: the controls, the page as text with ``\u0001N\u0001``
#: where control N is, and the frames of other origins (``\u0002K\u0002`` in the text) with ``at`` (how
#: many controls come before each) and ``corner`` (its content box in this document's viewport).
READ_SCRIPT = (
    "(withText) => {"
    + _CONTROLS
    + r"""
  const all = everything();
  const list = controls(all);
  const index = new Map(list.map((el, i) => [el, i]));
  const far = all.filter(isFar);
  const farIndex = new Map(far.map((el, i) => [el, i]));
  const at = [];
  let before = 0;
  for (const el of all) {
    if (index.has(el)) before++;
    if (farIndex.has(el)) at.push(before);
  }
  let text = '';
  if (withText) {
    const out = [];
    const BLOCK = /^(ADDRESS|ARTICLE|ASIDE|BLOCKQUOTE|DIV|DL|DT|DD|FIELDSET|FIGURE|FOOTER|FORM|H[1-6]|HEADER|HR|LI|MAIN|NAV|OL|P|PRE|SECTION|TABLE|TR|UL|BR|DETAILS|SUMMARY|LABEL)$/;
    const walk = (node) => {
      if (node.nodeType === 3) { out.push(node.textContent.replace(/\s+/g, ' ')); return; }
      if (node.nodeType !== 1) return;
      const el = node;
      if (['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD'].includes(el.tagName)) return;
      if (index.has(el)) {
        out.push(' \u0001' + index.get(el) + '\u0001 ');
        if (roleOf(el) !== 'scrollable') return;  // a panel's ref, then its text
      }
      if (el.checkVisibility && !el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) return;
      const block = BLOCK.test(el.tagName);
      if (block) out.push('\n');
      if (el.tagName === 'TD' || el.tagName === 'TH') out.push(' | ');
      for (const child of el.childNodes) walk(child);
      if (el.shadowRoot) for (const child of el.shadowRoot.childNodes) walk(child);
      const doc = frameDoc(el);
      if (doc && doc.body) walk(doc.body);
      if (farIndex.has(el)) out.push('\n\u0002' + farIndex.get(el) + '\u0002\n');
      if (block) out.push('\n');
    };
    if (document.body) walk(document.body);
    text = out.join('');
  }
  return {controls: list.map(describe), text, far: far.map((el, i) => ({at: at[i], corner: cornerOf(el)}))};
}"""
)

#: The frame elements of other origins, in ``READ_SCRIPT``'s order (their ``K``).
FAR_SCRIPT = "() => {" + _CONTROLS + "return everything().filter(isFar);\n}"

#: ``(frameElement, [x, y]) => null`` when the frame element is what shows at (x, y) of its document,
#: else what covers it (``role "name"``).
COVER_SCRIPT = (
    "(frame, [x, y]) => {"
    + _CONTROLS
    + r"""
  const top = deepAt(x, y);
  if (!top || top === frame) return null;
  return roleOf(top) + ' "' + clean(top.innerText || top.getAttribute('aria-label') || top.tagName) + '"';
}"""
)

#: Control (role, name, nth) found again: ``{found, x, y, covered}``, scrolled into view first.
RESOLVE_SCRIPT = (
    "([role, name, nth]) => {"
    + _CONTROLS
    + r"""
  const same = controls().filter((el) => roleOf(el) === role && nameOf(el) === name);
  const el = same[nth];
  if (!el) return {found: false};
  const r0 = el.getBoundingClientRect();
  const [ox, oy] = offsetOf(el);
  if (r0.top + oy < 0 || r0.left + ox < 0 || r0.bottom + oy > innerHeight || r0.right + ox > innerWidth) {
    el.scrollIntoView({block: 'center', inline: 'center', behavior: 'instant'});
  }
  const d = describe(el);
  const top = deepAt(d.x, d.y);
  let covered = null;
  if (top && top !== el && !inside(el, top) && !inside(top, el) &&
      !(el.labels && [...el.labels].some((l) => inside(l, top)))) {
    covered = roleOf(top) + ' "' + clean(top.innerText || top.getAttribute('aria-label') || top.tagName) + '"';
  }
  return {found: true, x: d.x, y: d.y, covered};
}"""
)


class Control(BaseModel):
    """One control as the read script gives it (viewport CSS pixels)."""

    role: str
    name: str
    value: str | None = None
    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True, slots=True)
class RefKey:
    """A ref's control: its role, name and rank among the page's controls with both (``nth``), its
    rank among those of the read it came from (``local``: the page's own, or a frame of another
    origin's, ``far``)."""

    role: str
    name: str
    nth: int
    local: int = 0
    far: bool = False


class RefTable:
    """The refs of a session's last read: ``eN`` → the control's role, name and rank among its likes."""

    def __init__(self) -> None:
        self._keys: dict[int, RefKey] = {}

    def renumber(self, controls: list[Control], owners: Sequence[tuple[bool, int]] | None = None) -> None:
        """Refs 1..N for the controls of a new read (the old ones no longer hold); ``owners``: for
        each, whether a frame of another origin holds it and its rank in that frame's read."""
        counts: dict[tuple[str, str], int] = {}
        self._keys = {}
        for i, control in enumerate(controls, start=1):
            nth = counts.get((control.role, control.name), 0)
            counts[(control.role, control.name)] = nth + 1
            far, local = owners[i - 1] if owners is not None else (False, nth)
            self._keys[i] = RefKey(control.role, control.name, nth, local, far)

    def key(self, ref: str) -> RefKey:
        """The control ``ref`` names (ShellError 2 for a malformed ref or one the last read did not print)."""
        number = parse_ref(ref)
        key = self._keys.get(number)
        if key is None:
            raise ShellError(
                EXIT_BAD,
                f"unknown ref @e{number}: read the page again (snap, text or find) and use a ref it prints",
            )
        return key


def parse_ref(ref: str) -> int:
    match = _REF.match(ref.strip())
    if match is None:
        raise ShellError(EXIT_BAD, f"{ref[:40]!r} is not a ref: refs look like @e12 (from snap, text or find)")
    return int(match.group(1))
