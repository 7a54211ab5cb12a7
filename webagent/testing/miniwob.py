"""A scripted MiniWoB++ policy: the right clicks and typing for five tasks, read off the page.

``PLAN`` is a JavaScript function run in a task's page once it started: it returns the actions that
solve it, in CSS pixels of the viewport (``{"kind": "click" | "type" | "select", "x", "y", "text"?,
"bid"?}``; ``type`` clicks the field, then types; ``select`` chooses an option of a native select,
``bid`` being BrowserGym's id of it where BrowserGym marked the page). The tests and
``benchmarks/rollouts.py`` drive webagent's environment and BrowserGym's with the same plan, so the
same actions land at the same elements. ``WRONG`` is a plan that fails each task (its first wrong
click, or a wrong text).
"""

from __future__ import annotations

__all__ = ["PLAN", "PLANNED_TASKS", "WRONG", "env_action"]

#: The tasks ``PLAN`` solves.
PLANNED_TASKS = ("click-button", "click-link", "enter-text", "choose-list", "click-checkboxes")

_COMMON = r"""
  const task = location.pathname.split('/').pop().replace('.html', '');
  const u = core.getUtterance();
  const text = typeof u === 'string' ? u : u.utterance;
  const quoted = (text.match(/"([^"]*)"/) || [])[1];
  const at = (el, extra) => {
    const r = el.getBoundingClientRect();
    return Object.assign({x: r.x + r.width / 2, y: r.y + r.height / 2, bid: el.getAttribute('bid')}, extra || {});
  };
  const click = (el) => at(el, {kind: 'click'});
  const byText = (sel, t) => [...document.querySelectorAll(sel)].find((e) => e.textContent.trim() === t);
  const submit = () => document.querySelector('#subbtn') || byText('#area button', 'Submit');
"""

PLAN = (
    "() => {"
    + _COMMON
    + r"""
  switch (task) {
    case 'click-button': return [click(byText('#area button', quoted))];
    case 'click-link': return [click(byText('#area span.alink', quoted))];
    case 'enter-text': return [at(document.querySelector('#tt'), {kind: 'type', text: quoted}), click(submit())];
    case 'choose-list': {
      const want = text.replace(/^Select /, '').replace(/ from the list and click Submit\.$/, '');
      return [at(document.querySelector('#area select'), {kind: 'select', text: want}), click(submit())];
    }
    case 'click-checkboxes': {
      const want = text.replace(/^Select /, '').replace(/ and click Submit\.$/, '');
      const names = want === 'nothing' ? [] : want.split(', ');
      const boxes = [...document.querySelectorAll('#boxes label')].filter((l) => names.includes(l.textContent.trim()));
      return [...boxes.map((l) => click(l.querySelector('input'))), click(submit())];
    }
  }
  return null;
}"""
)

WRONG = (
    "() => {"
    + _COMMON
    + r"""
  switch (task) {
    case 'click-button': return [click([...document.querySelectorAll('#area button')].find((b) => b.textContent.trim() !== quoted))];
    case 'click-link': return [click([...document.querySelectorAll('#area span.alink')].find((a) => a.textContent.trim() !== quoted))];
    case 'enter-text': return [at(document.querySelector('#tt'), {kind: 'type', text: quoted + 'x'}), click(submit())];
    case 'choose-list': {
      const sel = document.querySelector('#area select');
      const want = text.replace(/^Select /, '').replace(/ from the list and click Submit\.$/, '');
      const other = [...sel.options].map((o) => o.textContent).find((o) => o !== want);
      return [at(sel, {kind: 'select', text: other}), click(submit())];
    }
    case 'click-checkboxes': {
      const want = text.replace(/^Select /, '').replace(/ and click Submit\.$/, '');
      const names = want === 'nothing' ? [] : want.split(', ');
      const boxes = [...document.querySelectorAll('#boxes label')].filter((l) => !names.includes(l.textContent.trim()));
      return [...boxes.map((l) => click(l.querySelector('input'))), click(submit())];
    }
  }
  return null;
}"""
)


def env_action(planned: dict[str, object]) -> dict[str, object]:
    """A planned action as webagent's action (its point is ``planned["x"], planned["y"]`` in CSS pixels)."""
    kind, text = planned["kind"], str(planned.get("text") or "")
    if kind == "click":
        return {"action": "click_element", "element": "the planned element"}
    if kind == "type":
        return {"action": "write_element", "element": "the planned field", "content": text}
    if kind == "select":
        return {"action": "select_option", "element": "the planned list", "option": text}
    raise ValueError(f"unknown planned action {kind!r}")
