"""JavaScript the browser session evaluates in pages (function expressions for ``page.evaluate``;
the ``VIEW_*`` ones are plain expressions for CDP ``Runtime.evaluate``)."""

__all__ = [
    "FILE_INPUT_OF",
    "FIND_SELECT",
    "GIVE_FILE",
    "HIDE_CARET",
    "MASK_FOCUSED",
    "PAGE_TEXT",
    "SELECT_OF",
    "SHOW_CARET",
    "TWO_FRAMES",
    "VIEW_AFTER_FRAME",
    "VIEW_NOW",
    "WAIT_FOR_LOAD",
]

# The text caret made transparent, as Playwright's own screenshots do: it blinks, so two captures of
# an unchanged page with a focused field would differ (and the model sees a focused field by its
# focus ring and its text). A constructed sheet, which no Content-Security-Policy forbids; kept on
# the document under a symbol, so that SHOW_CARET can take it off a caller's page again.
HIDE_CARET = """(() => {
  const key = Symbol.for("webagent.caret");
  if (document[key]) return;
  try {
    const sheet = new CSSStyleSheet();
    sheet.replaceSync("*{caret-color:transparent!important}");
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
    Object.defineProperty(document, key, {value: sheet, configurable: true});
  } catch (e) {}
})()"""
SHOW_CARET = """(() => {
  const key = Symbol.for("webagent.caret"), sheet = document[key];
  if (!sheet) return;
  document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet);
  delete document[key];
})()"""
# The page's real timers: a seeded environment pauses the page's own (Playwright's clock, whose
# originals it keeps), and these waits are for the browser's frames, not for the page's time.
REAL = "(globalThis.__pwClock ? globalThis.__pwClock.builtins : globalThis)"
TWO_FRAMES = f"() => new Promise(r => {REAL}.requestAnimationFrame(() => {REAL}.requestAnimationFrame(() => r(0))))"
# The document's load event, seen from the page itself (Playwright's own load state can miss it).
WAIT_FOR_LOAD = "() => document.readyState === 'complete' || new Promise(r => addEventListener('load', () => r(true), {once: true}))"
# The visible text and form values (password fields left out), for replay fingerprints.
PAGE_TEXT = """() => {
  const body = document.body;
  if (!body) return "";
  const values = Array.from(document.querySelectorAll("input, textarea, select"), (e) =>
    e.type === "password" ? "" : (e.type === "checkbox" || e.type === "radio") ? String(e.checked) : e.value);
  return body.innerText + "\u0000" + values.join("\u0001");
}"""
# Scroll offsets (for the screenshot clip), title and the document's URL, read in the same round trip
# as the settle wait (the URL: a same-document navigation the page made, which Playwright's own
# channel may report late when the session's commands go over the direct DevTools connection).
VIEW_NOW = "[window.visualViewport ? visualViewport.pageLeft : scrollX, window.visualViewport ? visualViewport.pageTop : scrollY, document.title, location.href]"
# settle() reads the view with a plain Runtime.evaluate: a round trip through the page's main thread, so
# every input handler has run and any navigation or new tab it asked for has been announced over
# CDP. It requests no extra frame (the screenshot waits for the next composited frame by itself),
# except after wheel and key scrolling, which the compositor applies on the next frame.
VIEW_AFTER_FRAME = f"new Promise(r => {REAL}.requestAnimationFrame(() => r({VIEW_NOW})))"

# The option of the select at an element (itself, its label's control, the select around it, or
# the one select inside it) that matches the wanted label or value; run on the element found at
# the point (``webagent.browser.frames.locate``: through frames and shadow roots).
FIND_SELECT = """(el, wanted) => {
  if (!el) return {error: "there is no element at that point"};
  if (el.tagName === "LABEL" && el.control) el = el.control;
  let select = el.closest("select");
  if (!select && el.tagName !== "SELECT") {
    const inner = el.querySelectorAll ? el.querySelectorAll("select") : [];
    if (inner.length === 1) select = inner[0];
  }
  if (!select) return {error: "the element there is a <" + el.tagName.toLowerCase() + ">, not a dropdown (select)"};
  const opts = Array.from(select.options);
  const norm = s => (s || "").trim().replace(/\\s+/g, " ").toLowerCase();
  const w = norm(wanted);
  const pick = opts.find(o => o.label.trim() === wanted.trim()) || opts.find(o => o.value === wanted)
    || opts.find(o => norm(o.label) === w) || opts.find(o => norm(o.value) === w)
    || opts.find(o => norm(o.label).includes(w));
  if (!pick) return {error: "no option matches " + JSON.stringify(wanted) + "; options are: "
    + opts.slice(0, 15).map(o => JSON.stringify(o.label.trim())).join(", ")};
  return {index: opts.indexOf(pick), label: pick.label.trim()};
}"""
# The select FIND_SELECT chose (the same rules), as a handle.
SELECT_OF = """el => {
  if (el.tagName === "LABEL" && el.control) el = el.control;
  return el.closest("select") || (el.querySelectorAll("select").length === 1 ? el.querySelector("select") : null);
}"""
# The file input at an element: itself, its label's control, or that of the label around it.
FILE_INPUT_OF = """el => {
  const isFile = e => e && e.tagName === "INPUT" && e.type === "file";
  if (isFile(el)) return el;
  if (el.tagName === "LABEL" && isFile(el.control)) return el.control;
  const label = el.closest("label");
  return label && isFile(label.control) ? label.control : null;
}"""

# Gives a file input (``this``: the one a file chooser was opened for) one file made of these bytes
# (base64), as a person choosing it would: its files replaced, then input and change.
GIVE_FILE = """function (name, type, data) {
  const bytes = Uint8Array.from(atob(data), c => c.charCodeAt(0));
  const files = new DataTransfer();
  files.items.add(new File([bytes], name, {type: type, lastModified: Date.now()}));
  this.files = files.files;
  this.dispatchEvent(new Event("input", {bubbles: true, composed: true}));
  this.dispatchEvent(new Event("change", {bubbles: true}));
}"""


# Renders the focused field's text as discs (like a password field) in every later screenshot.
# The click reaches a frame in another process after its reply has come back: the focus may land a
# moment later, so the focused field is waited for (up to ``ms``) before it is found missing.
MASK_FOCUSED = f"""(ms) => new Promise((resolve) => {{
  const real = {REAL};
  const until = real.performance.now() + ms;
  const attempt = () => {{
    let el = document.activeElement;
    while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
    if (el && el !== document.body && el.tagName !== "IFRAME") {{
      el.style.setProperty("-webkit-text-security", "disc", "important");
      resolve(true);
    }} else if (real.performance.now() >= until) {{
      resolve(false);
    }} else {{
      real.setTimeout(attempt, 20);
    }}
  }};
  attempt();
}})"""
