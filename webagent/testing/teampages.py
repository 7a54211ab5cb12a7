"""The pages of ``TeamSite`` (``webagent.testing.teamsite``), laid out at fixed CSS pixels.

Every control is absolutely positioned, so the scripted localizer's points are exact: the
``/frames/`` page puts an open shadow root's controls in column x=300, a same-origin iframe's in
column x=750 and a cross-origin iframe's (inside a shadow root there too) in column x=1100, each
column with a text field (y=150), a select (y=220), a button (y=290) and a file input (y=360).
"""

from __future__ import annotations

__all__ = [
    "ECHO_PAGE",
    "FRAME_COLUMNS",
    "FRAME_ROWS",
    "LOGIN_PAGE",
    "OTP_PAGE",
    "UPLOAD_BUTTON_PAGE",
    "UPLOAD_PAGE",
    "frames_page",
    "inner_frame_page",
    "item_page",
    "page",
]

#: Where each kind of control sits on ``/frames/``: the column of each place, the row of each kind.
FRAME_COLUMNS = {"shadow": 300, "same": 750, "cross": 1100}
FRAME_ROWS = {"text": 150, "select": 220, "button": 290, "file": 360}

_STYLE = """
body { margin: 0; font: 18px/1.4 sans-serif; }
.at { position: absolute; box-sizing: border-box; }
input, select, button { font: 18px sans-serif; }
h1 { position: absolute; left: 250px; top: 40px; margin: 0; font-size: 28px; }
"""


def page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{title}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{title}</h1>"
        f"<div style='position:absolute;left:250px;top:100px;right:20px'>{body}</div></body></html>"
    )


def _field(name: str, kind: str, cx: int, cy: int, w: int = 300, h: int = 40, extra: str = "") -> str:
    return (
        f"<input class=at type={kind} name={name} id={name} {extra} "
        f"style='left:{cx - w // 2}px;top:{cy - h // 2}px;width:{w}px;height:{h}px'>"
    )


def _bare(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{title}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{title}</h1>{body}</body></html>"
    )


LOGIN_PAGE = _bare(
    "Sign in",
    "<form method=post action=/login>"
    "<input type=hidden name=next value='{next}'>"
    + _field("user", "text", 400, 200, extra="placeholder=User autocomplete=off")
    + _field("password", "password", 400, 280, extra="placeholder=Password")
    + "<input type=submit style='position:absolute;left:-9999px'></form>",
)

OTP_PAGE = _bare(
    "Two-step verification",
    "<p class=at style='left:250px;top:100px'>Enter the 6-digit code from your authenticator app.</p>"
    "<form method=post action=/2fa><input type=hidden name=next value='{next}'>"
    + _field("code", "text", 400, 200, extra="placeholder=Code inputmode=numeric autocomplete=one-time-code")
    + "<input type=submit style='position:absolute;left:-9999px'></form>",
)


def item_page(n: int, status: str) -> str:
    return page(f"Item {n}", f"<p id=status>Item {n} status: <b>{status}</b></p><p><a href=/app/>Back</a></p>")


ECHO_PAGE = _bare(
    "Echo",
    """<table class=at style='left:20px;top:90px;font-size:14px' id=headers>{rows}</table>
<pre class=at style='left:700px;top:90px;font-size:14px' id=browser></pre>
<script>
const out = {
  language: navigator.language,
  languages: navigator.languages,
  timezone: Intl.DateTimeFormat().resolvedOptions().timeZone,
  userAgent: navigator.userAgent,
  viewport: [innerWidth, innerHeight],
  touch: navigator.maxTouchPoints,
  dark: matchMedia('(prefers-color-scheme: dark)').matches,
  light: matchMedia('(prefers-color-scheme: light)').matches,
};
function send(extra) {
  Object.assign(out, extra);
  document.getElementById('browser').textContent = JSON.stringify(out, null, 1);
  fetch('/echo/report', {method: 'POST', headers: {'Content-Type': 'application/json'}, body: JSON.stringify(out)});
}
if (navigator.permissions) {
  navigator.permissions.query({name: 'geolocation'}).then(p => {
    if (p.state !== 'granted') { send({geolocation: p.state}); return; }
    navigator.geolocation.getCurrentPosition(
      pos => send({geolocation: [pos.coords.latitude, pos.coords.longitude]}),
      err => send({geolocation: 'error ' + err.code}), {timeout: 5000});
  });
} else { send({geolocation: 'none'}); }
</script>""",
)

_UPLOAD_SCRIPT = """<script>
const input = document.getElementById('file');
input.addEventListener('change', () => {
  const data = new FormData();
  for (const f of input.files) data.append('file', f);
  fetch('/upload?from=' + (window.FROM || 'upload'), {method: 'POST', body: data})
    .then(r => r.text()).then(t => { document.getElementById('result').textContent =
      'Uploaded: ' + Array.from(input.files).map(f => f.name + ' (' + f.size + ' bytes)').join(', '); });
});
</script>"""

UPLOAD_PAGE = _bare(
    "Upload a document",
    _field("file", "file", 400, 200)
    + "<p class=at id=result style='left:250px;top:260px'>No file yet.</p>"
    + _UPLOAD_SCRIPT,
)

UPLOAD_BUTTON_PAGE = _bare(
    "Upload a document",
    "<input type=file id=file style='display:none'>"
    "<button class=at id=choose style='left:250px;top:180px;width:300px;height:40px' "
    "onclick=\"document.getElementById('file').click()\">Choose a file…</button>"
    "<p class=at id=result style='left:250px;top:260px'>No file yet.</p>"
    "<script>window.FROM = 'button';</script>" + _UPLOAD_SCRIPT,
)

_CONTROLS = """
<input class=at type=text id=text style='left:{l}px;top:130px;width:200px;height:40px' placeholder='Text {who}'>
<select class=at id=select style='left:{l}px;top:200px;width:200px;height:40px'>
  <option>none</option><option>alpha</option><option>beta</option><option>gamma</option></select>
<button class=at id=button style='left:{l}px;top:270px;width:200px;height:40px'>Press {who}</button>
<input class=at type=file id=file style='left:{l}px;top:340px;width:200px;height:40px'>
<p class=at id=state style='left:{l}px;top:400px;width:250px;font-size:14px'>-</p>
"""

_REPORT = """
function report(root, who) {
  const send = (kind, value) => {
    root.getElementById('state').textContent = kind + ': ' + value;
    fetch('/frames/event', {method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({who, kind, value,
        focused: (root.activeElement && root.activeElement.id) || null})});
  };
  root.getElementById('text').addEventListener('change', e => send('text', e.target.value));
  root.getElementById('text').addEventListener('keydown', e => { if (e.key === 'Enter') send('text', e.target.value); });
  root.getElementById('select').addEventListener('change', e => send('select', e.target.value));
  root.getElementById('button').addEventListener('click', () => send('button', 'pressed'));
  root.getElementById('file').addEventListener('change', e => {
    const f = e.target.files[0];
    const data = new FormData(); data.append('file', f);
    fetch('/upload?from=' + who, {method: 'POST', body: data});
    send('file', f.name + ' ' + f.size);
  });
}
"""


def frames_page(*, same: str, cross: str) -> str:
    shadow_left = 300 - 100
    return _bare(
        "Frames and shadow roots",
        f"""<div id=host></div>
<iframe class=at src='{same}' style='left:600px;top:0;width:300px;height:500px;border:0'></iframe>
<iframe class=at src='{cross}' style='left:950px;top:0;width:300px;height:500px;border:0'></iframe>
<script>{_REPORT}
const root = document.getElementById('host').attachShadow({{mode: 'open'}});
root.innerHTML = `<style>{_STYLE}</style>{_CONTROLS.format(l=shadow_left, who="shadow")}`;
report(root, 'shadow');
</script>""",
    )


def inner_frame_page(who: str, *, shadow: bool) -> str:
    """A frame 300 CSS pixels wide whose controls sit at x=150 (the column's centre on ``/frames/``)."""
    controls = _CONTROLS.format(l=50, who=who)
    if shadow:
        body = (
            f"<div id=host></div><script>{_REPORT}const root = document.getElementById('host')"
            f".attachShadow({{mode: 'open'}}); root.innerHTML = `<style>{_STYLE}</style>{controls}`;"
            f"report(root, {who!r});</script>"
        )
    else:
        body = f"{controls}<script>{_REPORT}report(document, {who!r});</script>"
    return (
        f"<!doctype html><html><head><meta charset=utf-8><style>{_STYLE} body{{background:#eef}}</style>"
        f"</head><body>{body}</body></html>"
    )
