"""The /trouble/ pages over plain HTTP: what each trap sends."""

from __future__ import annotations

import http.client
import threading
import time
from urllib.parse import urlsplit

from webagent.testing.sites import SiteServer
from webagent.testing.trouble import DOWNLOAD_NAME, TRAPS


def _get(site: SiteServer, path: str) -> http.client.HTTPResponse:
    parts = urlsplit(site.url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=5)
    conn.request("GET", path)
    return conn.getresponse()


def test_index_lists_every_trap(site: SiteServer) -> None:
    resp = _get(site, "/trouble/")
    page = resp.read().decode()
    assert resp.status == 200
    for href in (
        "/trouble/download.bin",
        "/trouble/loop",
        "/trouble/never-loads",
        "/trouble/guarded",
        "/trouble/slow-loop",
    ):
        assert f"href='{href}'" in page
    assert 'type="file"' in page
    assert len(TRAPS) == 6 and all(100 <= x <= 400 for x, _ in TRAPS.values())


def test_download_loop_and_guard(site: SiteServer) -> None:
    download = _get(site, "/trouble/download.bin")
    assert download.status == 200 and download.read()
    assert download.getheader("Content-Disposition") == f'attachment; filename="{DOWNLOAD_NAME}"'
    loop = _get(site, "/trouble/loop")
    assert loop.status == 302 and loop.getheader("Location") == "/trouble/loop"
    slow = _get(site, "/trouble/slow-loop")
    assert slow.status == 302 and slow.getheader("Location") == "/trouble/slow-loop"
    guarded = _get(site, "/trouble/guarded").read().decode()
    assert "beforeunload" in guarded
    assert _get(site, "/trouble/nothing").status == 404


def test_never_loads_streams_until_the_server_stops() -> None:
    with SiteServer() as site:
        resp = _get(site, "/trouble/never-loads")
        assert resp.status == 200 and resp.getheader("Content-Length") is None
        first = resp.read1(65536)
        assert b"never finishes loading" in first
        more = resp.read1(65536)  # a trickle, not the end of the body
        assert b"still loading" in more
        handlers = {t for t in threading.enumerate() if "process_request_thread" in t.name}
        assert handlers
        started = time.monotonic()
    # Stopping the server released the handler: the body ends instead of streaming on.
    rest = resp.read()
    assert time.monotonic() - started < 3.0
    assert rest.count(b"still loading") < 20
    deadline = time.monotonic() + 3
    while any(t.is_alive() for t in handlers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.is_alive() for t in handlers)
