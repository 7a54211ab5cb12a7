"""The floor's page, task and script: a local site that shows the session's cookie and
``navigator.language``, a task that asks for a saved sign-in, a locale, two steps and an expectation,
and the offline model's script for it (what each entry point of tests/tasks/test_floor.py runs)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webagent.config import ContextSettings
from webagent.tasks import TaskOptions, TaskSpec
from webagent.testing.server import FakeModelServer

GOAL = "Say whether the floor page sees the saved sign-in and in which language"
EXPECT = "the floor page says the visitor is signed in, in French"
COOKIE = ("sid", "floor-7b1c2d")
LOCALE = "fr-FR"
#: Where the page's redirect lands when it saw the cookie and the locale.
SEEN = f"/seen?signed_in=yes&lang={LOCALE}"
#: The step limit of the task; the config's (``CONFIG_MAX_STEPS``) is larger, so a run that ignores
#: the task's limit shows it.
MAX_STEPS = 2
CONFIG_MAX_STEPS = 5

_SEEN_PAGE = b"""<!doctype html><html><head><title>Floor</title></head><body>
<h1>Floor</h1><p id="cookie"></p><p id="language"></p>
<script>
document.getElementById("cookie").textContent = "cookie: " + document.cookie;
document.getElementById("language").textContent = "language: " + navigator.language;
</script></body></html>"""


@dataclass
class FloorSite:
    """The page: ``/start`` redirects to ``/seen?signed_in=yes|no&lang=<Accept-Language>`` by the
    cookie and language the browser sent; ``/seen`` shows ``document.cookie`` and ``navigator.language``."""

    url: str = ""
    #: (path, the cookie was sent, Accept-Language) of each request.
    seen: list[tuple[str, bool, str]] = field(default_factory=list)

    def starts(self) -> list[tuple[bool, str]]:
        return [(signed, lang) for path, signed, lang in self.seen if path.startswith("/start")]


@contextmanager
def floor_site() -> Iterator[FloorSite]:
    site = FloorSite()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            cookie = self.headers.get("Cookie") or ""
            signed = f"{COOKIE[0]}={COOKIE[1]}" in cookie
            lang = (self.headers.get("Accept-Language") or "").split(",")[0].split(";")[0]
            site.seen.append((self.path, signed, lang))
            if self.path.startswith("/start"):
                self.send_response(302)
                self.send_header("Location", f"/seen?signed_in={'yes' if signed else 'no'}&lang={lang}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = _SEEN_PAGE if self.path.startswith("/seen") else b"not found"
            self.send_response(200 if self.path.startswith("/seen") else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="floor-site", daemon=True)
    thread.start()
    site.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()


def write_state(path: Path) -> Path:
    """A saved sign-in: the session cookie of 127.0.0.1."""
    name, value = COOKIE
    cookie = {"name": name, "value": value, "domain": "127.0.0.1", "path": "/", "expires": -1}
    cookie |= {"httpOnly": False, "secure": False, "sameSite": "Lax"}
    path.write_text(json.dumps({"cookies": [cookie], "origins": []}), encoding="utf-8")
    return path


def floor_task(site: FloorSite, state: Path) -> TaskSpec:
    return TaskSpec(
        id="floor",
        url=f"{site.url}/start",
        goal=GOAL,
        options=TaskOptions(max_steps=MAX_STEPS, expect=EXPECT),
        browser=ContextSettings(storage_state=state, locale=LOCALE),
    )


def task_line(site: FloorSite, state: Path) -> dict[str, Any]:
    """The task as a task-file line (and, less ``id``, a suite's check)."""
    return {
        "id": "floor",
        "url": f"{site.url}/start",
        "goal": GOAL,
        "max_steps": MAX_STEPS,
        "expect": EXPECT,
        "browser": {"storage_state": str(state), "locale": LOCALE},
    }


def script() -> dict[str, Any]:
    """The offline models: the policy scrolls on the page and answers when it must (the final step);
    the validator accepts only on the page that saw the cookie and the locale."""
    return {
        "tasks": [
            {
                "id": "floor",
                "match": GOAL,
                "policy": [
                    {"when": {"final": True}, "action": {"action": "answer", "content": "signed in, in French"}},
                    {"when": {"url": "/seen"}, "action": {"action": "scroll", "direction": "down"}},
                ],
                "validator": {"accept": ["signed in"], "url": SEEN, "feedback": "The page does not show it."},
            }
        ]
    }


def expect_judged(server: FakeModelServer) -> bool:
    """Whether the validator was asked, and the task's expectation was in what it was asked."""
    asked = [r for r in server.requests if r.role == "validator"]
    return bool(asked) and all(EXPECT in r.text or EXPECT in r.turn for r in asked)
