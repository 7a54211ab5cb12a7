"""The local task sites, webagent/testing/data/local.jsonl and the offline-model scripts in webagent/testing/data/scripts.

Browser tests drive a real Chromium (one per module) and check that every scripted element
coordinate hits the intended element, and that every script, played the way the agent plays it
(mouse clicks at the scripted CSS-pixel centres, typing, native select, wheel scrolls, new tabs),
ends with an answer the script's own validator accepts.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import signal
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Dialog, Page, Request, ViewportSize
from playwright.async_api import Error as PlaywrightError

from webagent.testing.script import load_script
from webagent.testing.sites import COUNTRIES, PRODUCTS, SiteServer, data_dir, reference_code, sites_dir

VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
SCROLL_PX = int(0.8 * VIEWPORT["height"])  # what the agent's scroll action wheels
MAX_STEPS = 12

TASKS_DIR = data_dir()
SCRIPTS_DIR = TASKS_DIR / "scripts"
LOCAL_TASKS: list[dict[str, str]] = [
    json.loads(line) for line in (TASKS_DIR / "local.jsonl").read_text().splitlines() if line.strip()
]
SCRIPTS: dict[str, dict[str, Any]] = {
    p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(SCRIPTS_DIR.glob("*.json"))
}

# Script element key -> (data-testid of the element it must hit, pages where it is used as
# (path, number of agent scrolls before the action)).
ELEMENT_TARGETS: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {
    "catalog search box": (
        "catalog-search-input",
        (("/catalog/", 0), ("/catalog/search?q=blue+widget", 0), ("/catalog/search?q=red+gadget", 0)),
    ),
    "first search result": (
        "search-result-0",
        (("/catalog/search?q=blue+widget", 0), ("/catalog/search?q=red+gadget", 0)),
    ),
    "full name field": ("form-name", (("/form/", 0),)),
    "email address field": ("form-email", (("/form/", 0),)),
    "country dropdown": ("form-country", (("/form/", 0),)),
    "accept terms checkbox": ("form-terms", (("/form/", 0),)),
    "register submit button": ("form-submit", (("/form/", 0),)),
    "show help button": ("form-help", (("/form/", 0),)),
    "order details link": ("tabs-order-link", (("/tabs/", 0),)),
}

WHEN_KEYS = {"step", "url", "last_action", "feedback", "no_feedback", "final"}
ACTION_FIELDS: dict[str, tuple[set[str], set[str]]] = {  # kind -> (required, optional)
    "click_element": ({"element"}, set()),
    "write_element": ({"element", "content"}, {"press_enter"}),
    "scroll": ({"direction"}, set()),
    "press_key": ({"key"}, set()),
    "select_option": ({"element", "option"}, set()),
    "goto": ({"url"}, set()),
    "go_back": (set(), set()),
    "refresh": (set(), set()),
    "wait": ({"seconds"}, set()),
    "answer": ({"content"}, set()),
}

TESTID_AT_POINT = """([x, y]) => {
  const el = document.elementFromPoint(x, y);
  const hit = el && el.closest('[data-testid]');
  if (!hit) return null;
  const r = hit.getBoundingClientRect();
  return {testid: hit.getAttribute('data-testid'), tag: el.tagName.toLowerCase(),
          x: r.left + r.width / 2, y: r.top + r.height / 2, width: r.width, height: r.height};
}"""

TEXT_IN_VIEWPORT = """(needle) => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const i = n.data.indexOf(needle);
    if (i < 0) continue;
    const range = document.createRange();
    range.setStart(n, i);
    range.setEnd(n, i + needle.length);
    const b = range.getBoundingClientRect();
    if (b.width > 0 && b.top >= 0 && b.left >= 0 && b.bottom <= innerHeight && b.right <= innerWidth) return true;
  }
  return false;
}"""

# Another font stack and size: positions of scripted elements must not move.
FONT_OVERRIDE = "* { font-family: monospace !important; font-size: 26px !important; letter-spacing: 1px !important; }"


def _task_elements(script: dict[str, Any], task: dict[str, Any]) -> dict[str, list[int]]:
    return {**script.get("elements", {}), **task.get("elements", {})}


def _resolve(elements: dict[str, list[int]], request: str) -> str | None:
    """Longest element key contained (case-insensitively) in the localizer request text."""
    hits = [key for key in elements if key.casefold() in request.casefold()]
    return max(hits, key=len) if hits else None


def _script_task_for(goal: str, script: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in script["tasks"] if t["match"] in goal]


def _script_points() -> dict[str, set[tuple[int, int]]]:
    """Every element key of every script, with every coordinate any script gives it."""
    points: dict[str, set[tuple[int, int]]] = {}
    for script in SCRIPTS.values():
        for task in script["tasks"]:
            for key, (x, y) in _task_elements(script, task).items():
                points.setdefault(key, set()).add((x, y))
    return points


SCRIPT_POINTS = _script_points()
# Each page (path, scrolls) on which some scripted element is used.
ELEMENT_PAGES = sorted({page for _, pages in ELEMENT_TARGETS.values() for page in pages})


# --------------------------------------------------------------------------- fixtures


# `site` and `browser` are the shared fixtures of tests/conftest.py.


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    ctx = await browser.new_context(viewport=VIEWPORT, device_scale_factor=1)
    yield ctx
    await ctx.close()


def _get(url: str, data: bytes | None = None) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(url, data=data)
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.read().decode("utf-8"), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8"), dict(err.headers)


def _raw(site: SiteServer, method: str, path: str) -> tuple[int, str, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", site.port, timeout=5)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode("utf-8", errors="replace"), dict(resp.getheaders())
    finally:
        conn.close()


# --------------------------------------------------------------------------- tasks and scripts


def test_sites_dir_holds_the_sites() -> None:
    root = sites_dir()
    for name in ("index.html", "catalog/index.html", "form/index.html", "longpage/index.html", "tabs/index.html"):
        assert (root / name).is_file(), name


def test_local_tasks_have_matching_scripts() -> None:
    ids = [t["id"] for t in LOCAL_TASKS]
    assert len(ids) == len(set(ids))
    assert {"catalog-price", "catalog-feedback", "form-register", "longpage-code", "tabs-order"} <= set(ids)
    for task in LOCAL_TASKS:
        assert set(task) == {"id", "url", "goal"}, task
        assert task["url"].startswith("{base}/"), task
        script = SCRIPTS.get(task["id"])
        assert script is not None, f"no webagent/testing/data/scripts/{task['id']}.json"
        matched = _script_task_for(task["goal"], script)
        assert [t["id"] for t in matched] == [task["id"]], task["id"]
    # A goal must never be claimed by a task of another id in any script.
    for name, script in SCRIPTS.items():
        for task in LOCAL_TASKS:
            for t in _script_task_for(task["goal"], script):
                assert t["id"] == task["id"], (name, task["id"], t["id"])


def test_demo_script_is_the_catalog_script() -> None:
    assert SCRIPTS["demo"] == SCRIPTS["catalog-price"] == SCRIPTS["catalog-feedback"]
    assert {t["id"] for t in SCRIPTS["demo"]["tasks"]} == {"catalog-price", "catalog-feedback"}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_script_format(name: str) -> None:
    script = SCRIPTS[name]
    assert script["viewport"] == VIEWPORT
    assert script["tasks"]
    for task in script["tasks"]:
        assert {"id", "match", "elements", "policy", "validator"} <= set(task), task.get("id")
        elements = _task_elements(script, task)
        for key, xy in elements.items():
            assert key in ELEMENT_TARGETS, f"{name}: add {key!r} to ELEMENT_TARGETS"
            assert len(xy) == 2 and all(isinstance(v, int) for v in xy), key
            assert 0 <= xy[0] < VIEWPORT["width"] and 0 <= xy[1] < VIEWPORT["height"], key
            for other in elements:
                assert other == key or key.casefold() not in other.casefold(), (key, other)
        assert any(rule["when"].get("final") is True for rule in task["policy"]), "needs a final fallback"
        for rule in task["policy"]:
            assert set(rule) <= {"when", "note", "thought", "action"}, rule
            assert set(rule["when"]) <= WHEN_KEYS, rule["when"]
            action = dict(rule["action"])
            required, optional = ACTION_FIELDS[action.pop("action")]
            assert required <= set(action) <= required | optional, rule["action"]
            if "element" in action:
                assert _resolve(elements, action["element"]) == action["element"], action
            if rule["action"]["action"] == "scroll":
                assert action["direction"] in ("up", "down", "left", "right")
        validator = task["validator"]
        assert validator["accept"] and all(isinstance(a, str) for a in validator["accept"])
        assert isinstance(validator.get("feedback", ""), str)


def test_element_keys_are_distinct_across_each_script() -> None:
    """The fake model resolves element keys over all tasks of a script: no key may contain another."""
    for name, script in SCRIPTS.items():
        merged: dict[str, list[int]] = dict(script.get("elements", {}))
        for task in script["tasks"]:
            for key, xy in task.get("elements", {}).items():
                assert merged.setdefault(key, xy) == xy, (name, key)
        for key in merged:
            for other in merged:
                assert other == key or key.casefold() not in other.casefold(), (name, key, other)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_scripts_load_in_the_fake_model(name: str) -> None:
    script = load_script(SCRIPTS_DIR / f"{name}.json")
    for local in LOCAL_TASKS:
        task = script.task_for(local["goal"])
        assert task is None or task.id == local["id"], (name, local["id"])
    for task in script.tasks:
        for rule in task.policy:
            if "element" in rule.action:
                found = script.find_element(rule.action["element"])
                assert found is not None and found[0] == rule.action["element"], (name, rule.action)


# --------------------------------------------------------------------------- HTTP routes


def test_search_route(site: SiteServer) -> None:
    status, body, headers = _get(site.url + "/catalog/search?q=BLUE")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert 'data-testid="search-result-0"' in body and 'data-testid="search-result-1"' in body
    assert "Blue Widget" in body and "Blue Gadget" in body and "Red Gadget" not in body
    assert 'value="BLUE"' in body  # the search box keeps the query

    status, body, _ = _get(site.url + "/catalog/search?q=" + urllib.parse.quote("blue widget"))
    assert status == 200
    assert body.count('class="result"') == 1
    assert 'href="/catalog/product/blue-widget"' in body and "$12.50" not in body

    _, body, _ = _get(site.url + "/catalog/search?q=widget")
    assert body.count('class="result"') == 3

    _, body, _ = _get(site.url + "/catalog/search?q=")
    assert body.count('class="result"') == len(PRODUCTS) <= 8  # rows stay inside the 800 px viewport

    status, body, _ = _get(site.url + "/catalog/search?q=" + urllib.parse.quote("<zz>"))
    assert status == 200 and 'data-testid="no-results"' in body
    assert "&lt;zz&gt;" in body and "<zz>" not in body


def test_product_route(site: SiteServer) -> None:
    status, body, _ = _get(site.url + "/catalog/product/blue-widget")
    assert status == 200 and "Blue Widget" in body and "$12.50" in body
    _, body, _ = _get(site.url + "/catalog/product/red-gadget")
    assert "Red Gadget" in body and "$19.99" in body
    status, body, _ = _get(site.url + "/catalog/product/nope")
    assert status == 404 and 'data-testid="product-missing"' in body


def test_form_submission_is_recorded(site: SiteServer) -> None:
    before = len(site.submissions)
    data = urllib.parse.urlencode(
        {"name": "Grace  Brewster Hopper", "email": "grace@example.com", "country": "JP", "terms": "yes"}
    ).encode()
    status, body, _ = _get(site.url + "/form/submit", data=data)
    assert status == 200
    assert "REF-GBH-JP" in body and "Grace Brewster Hopper" in body and "grace@example.com" in body
    assert "Japan" in body
    assert site.submissions[before:] == [
        {
            "name": "Grace Brewster Hopper",
            "email": "grace@example.com",
            "country": "JP",
            "country_name": "Japan",
            "terms": "yes",
            "ref": "REF-GBH-JP",
        }
    ]
    # GET works too, and the country may be given by its label.
    query = urllib.parse.urlencode({"name": "ada lovelace", "email": "a@b.c", "country": "Canada", "terms": "on"})
    status, body, _ = _get(site.url + "/form/submit?" + query)
    assert status == 200 and "REF-AL-CA" in body
    assert site.submissions[-1]["ref"] == "REF-AL-CA" and len(site.submissions) == before + 2


def test_form_rejects_incomplete_submissions(site: SiteServer) -> None:
    before = len(site.submissions)
    data = urllib.parse.urlencode({"name": "Ada Lovelace", "email": "ada@example.com", "country": "CA"}).encode()
    status, body, _ = _get(site.url + "/form/submit", data=data)
    assert status == 400 and "accept the terms" in body and "REF-" not in body
    status, body, _ = _get(site.url + "/form/submit", data=b"terms=yes")
    assert status == 400 and "full name" in body and "email" in body and "country" in body
    assert len(site.submissions) == before


def test_form_select_matches_server_countries() -> None:
    text = (sites_dir() / "form" / "index.html").read_text(encoding="utf-8")
    options = re.findall(r'<option value="([A-Z]*)">([^<]+)</option>', text)
    assert options[0][0] == "" and dict(options[1:]) == COUNTRIES


def test_reference_code() -> None:
    assert reference_code("Ada Lovelace", "ca") == "REF-AL-CA"
    assert reference_code("  bob ", "FR") == "REF-B-FR"


@pytest.mark.parametrize(
    "path",
    [
        "/../pyproject.toml",
        "/catalog/../../pyproject.toml",
        "/%2e%2e/%2e%2e/pyproject.toml",
        "/catalog/..%2f..%2f..%2fpyproject.toml",
        "/catalog/%2E%2E/%2E%2E/%2E%2E/webagent/testing/sites.py",
        "/..%5c..%5cpyproject.toml",
        "/catalog/./index.html",
    ],
)
def test_path_traversal_is_rejected(site: SiteServer, path: str) -> None:
    status, body, _ = _raw(site, "GET", path)
    assert status == 403
    assert "[build-system]" not in body and "SiteServer" not in body


def test_symlink_out_of_root_is_rejected(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.html").write_text("<p>fine</p>")
    (tmp_path / "secret.txt").write_text("top secret")
    (root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with SiteServer(root=root) as server:
        assert _get(server.url + "/ok.html")[:2] == (200, "<p>fine</p>")
        status, body, _ = _get(server.url + "/leak.txt")
        assert status == 403 and "top secret" not in body
        assert _get(server.url + "/missing.html")[0] == 404


def test_static_files_and_directory_index(site: SiteServer) -> None:
    status, _, headers = _raw(site, "GET", "/catalog?x=1")
    assert status == 301 and headers["Location"] == "/catalog/?x=1"
    status, body, headers = _get(site.url + "/catalog/")
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert 'data-testid="catalog-search-input"' in body
    status, body, headers = _get(site.url + "/catalog/style.css")
    assert status == 200 and headers["Content-Type"].startswith("text/css")
    status, body, _ = _get(site.url + "/")
    assert status == 200 and "/longpage/" in body
    status, body, _ = _raw(site, "HEAD", "/form/")
    assert status == 200 and body == ""
    assert _raw(site, "POST", "/form/")[0] == 405
    assert _get(site.url + "/nowhere/")[0] == 404


def test_server_is_quiet(site: SiteServer, capfd: pytest.CaptureFixture[str]) -> None:
    _get(site.url + "/catalog/")
    _get(site.url + "/does-not-exist")
    _raw(site, "GET", "/../x")
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_server_lifecycle() -> None:
    server = SiteServer()
    with pytest.raises(RuntimeError):
        _ = server.url
    server.start()
    try:
        assert server.url == f"http://127.0.0.1:{server.port}" and server.port > 0
        assert server.expand("{base}/form/") == server.url + "/form/"
        with pytest.raises(RuntimeError):
            server.start()
    finally:
        server.stop()
    server.stop()  # idempotent
    assert not server.running


async def test_cli_serves_until_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "webagent.testing.sites",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 15)).decode().strip()
        prefix = "webagent task sites listening on http://127.0.0.1:"
        assert line.startswith(prefix) and line[len(prefix) :].isdigit(), line
        url = line.rsplit(" ", 1)[1]
        status, body, _ = await asyncio.to_thread(_get, url + "/tabs/")
        assert status == 200 and "tabs-order-link" in body
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
        assert (await proc.stderr.read()) == b""
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


# --------------------------------------------------------------------------- browser: coordinates


async def _scroll(page: Page, direction: str = "down") -> None:
    """The agent's scroll: a wheel of 80% of the viewport height at the viewport centre."""
    dx, dy = {"down": (0, SCROLL_PX), "up": (0, -SCROLL_PX), "right": (SCROLL_PX, 0), "left": (-SCROLL_PX, 0)}[
        direction
    ]
    await page.mouse.move(VIEWPORT["width"] / 2, VIEWPORT["height"] / 2)
    before = await page.evaluate("[scrollX, scrollY]")
    await page.mouse.wheel(dx, dy)
    last, stable = before, 0
    for _ in range(40):  # wait until the (possibly smooth) scroll settles
        await asyncio.sleep(0.025)
        now = await page.evaluate("[scrollX, scrollY]")
        stable = stable + 1 if now == last and now != before else 0
        last = now
        if stable >= 2:
            break


async def _testid_at(page: Page, x: int, y: int) -> dict[str, Any] | None:
    result: dict[str, Any] | None = await page.evaluate(TESTID_AT_POINT, [x, y])
    return result


@pytest.mark.browser
@pytest.mark.parametrize(("path", "scrolls"), ELEMENT_PAGES)
async def test_element_coordinates_hit_their_target(
    site: SiteServer, context: BrowserContext, path: str, scrolls: int
) -> None:
    """At every scripted point, elementFromPoint is the intended element (found by data-testid),
    with the page's own fonts and again with another font family and size."""
    keys = [k for k, (_, pages) in ELEMENT_TARGETS.items() if (path, scrolls) in pages and k in SCRIPT_POINTS]
    assert keys
    page = await context.new_page()
    await page.goto(site.url + path)
    for _ in range(scrolls):
        await _scroll(page)
    for fonts in ("default", "override"):
        if fonts == "override":
            await page.add_style_tag(content=FONT_OVERRIDE)
        for key in keys:
            testid = ELEMENT_TARGETS[key][0]
            for xy in sorted(SCRIPT_POINTS[key]):
                hit = await _testid_at(page, *xy)
                where = (key, xy, path, fonts, hit)
                assert hit is not None and hit["testid"] == testid, where
                # The scripted point is the element's centre, and the target is big.
                assert abs(hit["x"] - xy[0]) <= 1 and abs(hit["y"] - xy[1]) <= 1, where
                assert hit["width"] >= 160 and hit["height"] >= 40, where
    await page.close()


def test_every_scripted_element_is_checked_in_the_browser() -> None:
    assert set(SCRIPT_POINTS) <= set(ELEMENT_TARGETS)
    for key in SCRIPT_POINTS:
        assert ELEMENT_TARGETS[key][1], key


# --------------------------------------------------------------------------- browser: playing the scripts


@dataclass
class Played:
    accepted: bool
    answers: list[str] = field(default_factory=list)
    steps: int = 0
    url: str = ""
    answer_visible: bool = False
    text: str = ""  # the body text of the page at the accepted answer
    tabs: int = 0  # pages (tabs) used, the first included


def _when_holds(when: dict[str, Any], step: int, url: str, last_action: str, feedback: str | None) -> bool:
    for key, want in when.items():
        if key == "step":
            ok = step == want
        elif key == "url":
            ok = want in url
        elif key == "last_action":
            ok = want in last_action
        elif key == "feedback":
            ok = feedback is not None and want in feedback
        elif key == "no_feedback":
            ok = (feedback is None) == want
        elif key == "final":
            ok = (step == MAX_STEPS) == want
        else:
            raise AssertionError(f"unknown condition {key!r}")
        if not ok:
            return False
    return True


async def _play(context: BrowserContext, start_url: str, script: dict[str, Any], task: dict[str, Any]) -> Played:
    elements = _task_elements(script, task)
    validator = task["validator"]
    new_pages: list[Page] = []
    navigations: list[Page | None] = []  # the page each navigation request is for (None: a new tab)

    loads: list[Page] = []

    def on_load(loaded_page: Page) -> None:
        loads.append(loaded_page)

    def on_page(new_page: Page) -> None:
        new_pages.append(new_page)
        new_page.on("load", on_load)

    def on_request(request: Request) -> None:
        if request.is_navigation_request():
            try:
                navigations.append(request.frame.page)
            except PlaywrightError:  # issued before its frame exists: a new tab
                navigations.append(None)

    context.on("page", on_page)
    context.on("request", on_request)
    page = await context.new_page()
    await page.goto(start_url)
    played = Played(accepted=False)
    feedback: str | None = None
    last_action = ""
    try:
        for step in range(1, MAX_STEPS + 1):
            rules = [r for r in task["policy"] if _when_holds(r["when"], step, page.url, last_action, feedback)]
            assert rules, f"step {step}: no rule holds at {page.url}"
            action = rules[0]["action"]
            kind = action["action"]
            played.steps = step
            if kind == "answer":
                content = action["content"]
                played.answers.append(content)
                played.url = page.url
                if any(a in content for a in validator["accept"]) and validator.get("url", "") in page.url:
                    played.accepted = True
                    played.answer_visible = await page.evaluate(TEXT_IN_VIEWPORT, content)
                    played.text = await page.inner_text("body")
                    played.tabs = len(new_pages)
                    return played
                feedback = validator.get("feedback", "")
                last_action = f'- step {step}: answer "{content}" -> rejected'
                continue
            x = y = 0
            if "element" in action:
                key = _resolve(elements, action["element"])
                assert key is not None, action
                x, y = elements[key]
                hit = await _testid_at(page, x, y)
                want = ELEMENT_TARGETS[key][0]
                assert hit is not None and hit["testid"] == want, f"step {step}: {key} at {(x, y)} hit {hit}"
            opened, navigated, loaded = len(new_pages), len(navigations), len(loads)
            if kind == "click_element":
                await page.mouse.click(x, y)
            elif kind == "write_element":
                await page.mouse.click(x, y)
                await page.keyboard.press("ControlOrMeta+A")
                await page.keyboard.type(action["content"])
                if action.get("press_enter"):
                    await page.keyboard.press("Enter")
            elif kind == "select_option":
                handle = await page.evaluate_handle("([x, y]) => document.elementFromPoint(x, y)", [x, y])
                select = handle.as_element()
                assert select is not None
                await select.select_option(label=action["option"])
            elif kind == "scroll":
                await _scroll(page, action["direction"])
            elif kind == "press_key":
                await page.keyboard.press(action["key"])
            elif kind == "goto":
                await page.goto(action["url"])
            elif kind == "go_back":
                await page.go_back()
            elif kind == "refresh":
                await page.reload()
            elif kind == "wait":
                await asyncio.sleep(float(action["seconds"]))
            else:
                raise AssertionError(f"unknown action {kind!r}")
            # Let a navigation or a new tab start: up to 0.3 s for a navigation request; then wait
            # for the current page's next load event, or for the new tab.
            may_navigate = kind in ("click_element", "press_key") or (
                kind == "write_element" and bool(action.get("press_enter"))
            )
            for tick in range(200 if may_navigate else 0):
                fresh = navigations[navigated:]
                if len(new_pages) > opened:
                    page = new_pages[-1]  # the agent continues in the new tab
                    await page.wait_for_load_state("load")
                    break
                if page in fresh and page in loads[loaded:]:
                    break
                if not fresh and tick >= 12:
                    break
                await asyncio.sleep(0.025)
            target = f' "{action["element"]}"' if "element" in action else ""
            last_action = f"- step {step}: {kind}{target} -> ok"
        return played
    finally:
        context.remove_listener("page", on_page)
        context.remove_listener("request", on_request)
        for opened_page in new_pages:
            await opened_page.close()


EXPECTED_PLAYS: dict[str, tuple[list[str], str]] = {  # task id -> (answers, final URL suffix)
    "catalog-price": (["$12.50"], "/catalog/product/blue-widget"),
    "catalog-feedback": (["19.99", "$19.99"], "/catalog/product/red-gadget"),
    "form-register": (["REF-AL-CA"], "/form/submit"),
    "longpage-code": (["4711-ZETA"], "/longpage/"),
    "tabs-order": (["ORD-58213"], "/tabs/details.html"),
}


@pytest.mark.browser
@pytest.mark.parametrize("task_id", [t["id"] for t in LOCAL_TASKS])
async def test_script_plays_to_an_accepted_answer(site: SiteServer, context: BrowserContext, task_id: str) -> None:
    local = next(t for t in LOCAL_TASKS if t["id"] == task_id)
    script = SCRIPTS[task_id]
    (task,) = _script_task_for(local["goal"], script)
    before = len(site.submissions)
    played = await _play(context, site.expand(local["url"]), script, task)
    assert played.accepted, played
    assert played.answer_visible, f"{played.answers[-1]!r} is not visible on screen when answering"
    answers, url_suffix = EXPECTED_PLAYS[task_id]
    assert played.answers == answers
    assert played.url.endswith(url_suffix), played.url
    assert played.tabs == (2 if task_id == "tabs-order" else 1)
    if task_id == "form-register":
        assert "Reference code: REF-AL-CA" in played.text and "Ada Lovelace" in played.text
        assert site.submissions[before:] == [
            {
                "name": "Ada Lovelace",
                "email": "ada@example.com",
                "country": "CA",
                "country_name": "Canada",
                "terms": "yes",
                "ref": "REF-AL-CA",
            }
        ]


@pytest.mark.browser
async def test_show_help_opens_an_alert(site: SiteServer, context: BrowserContext) -> None:
    page = await context.new_page()
    await page.goto(site.url + "/form/")
    x, y = SCRIPTS["form-register"]["tasks"][0]["elements"]["show help button"]
    seen: list[tuple[str, str]] = []

    async def on_dialog(dialog: Dialog) -> None:
        # A pending alert blocks the click that opened it: it must be handled from the event.
        seen.append((dialog.type, dialog.message))
        await dialog.dismiss()

    page.on("dialog", on_dialog)
    await asyncio.wait_for(page.mouse.click(x, y), 10)
    for _ in range(200):
        if seen:
            break
        await asyncio.sleep(0.025)
    assert len(seen) == 1 and seen[0][0] == "alert" and "Register" in seen[0][1], seen
    await page.close()


@pytest.mark.browser
async def test_long_page_code_needs_five_scrolls(site: SiteServer, context: BrowserContext) -> None:
    page = await context.new_page()
    await page.goto(site.url + "/longpage/")
    box = '[data-testid="longpage-code"]'
    assert await page.evaluate("document.documentElement.scrollHeight") == 4000
    for n in range(1, 6):
        rect = await page.eval_on_selector(
            box, "e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom]; }"
        )
        assert rect[0] >= VIEWPORT["height"], f"code box already visible after {n - 1} scrolls"
        await _scroll(page)
        assert await page.evaluate("scrollY") == min(n * SCROLL_PX, 4000 - VIEWPORT["height"])
    top, bottom = await page.eval_on_selector(
        box, "e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom]; }"
    )
    assert top >= 0 and bottom <= VIEWPORT["height"]
    assert await page.evaluate(TEXT_IN_VIEWPORT, "4711-ZETA")
    await page.close()
