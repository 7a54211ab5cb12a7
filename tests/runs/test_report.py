"""The HTML run report: self-contained, escaped, tolerant of interrupted runs, and right in a real browser."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw
from playwright.async_api import Browser

from webagent.runs.report import load_run, render_report, render_report_html

XSS = "<script>alert(1)</script>"
W, H = 400, 250
CLICK = (300.0, 75.0)


def _image(fmt: str, colour: str) -> bytes:
    img = Image.new("RGB", (W, H), "white")
    ImageDraw.Draw(img).rectangle((280, 55, 320, 95), fill=colour)
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


def _call(role: str, raw: str) -> dict[str, Any]:
    usage = {"calls": 1, "prompt_tokens": 900, "completion_tokens": 40, "latency_s": 0.8}
    return {"role": role, "model": "m", "raw": [raw], "usage": usage, "error": None}


def _steps() -> list[dict[str, Any]]:
    base: dict[str, Any] = {"image_size": [W, H], "events": [], "note": "", "element": None, "point": None}
    timings = {"observe_s": 0.1, "policy_s": 0.9, "localize_s": 0.4, "act_s": 0.2, "total_s": 1.6}
    return [
        {
            **base,
            "index": 1,
            "kind": "action",
            "url": "http://127.0.0.1:1/shop",
            "title": XSS,
            "screenshot": "step_001.png",
            "thought": "Click the red <b>Buy</b> button",
            "action": {"action": "click_element", "element": "red Buy button"},
            "element": "red Buy button",
            "point": {"image": list(CLICK), "viewport": [600.0, 150.0]},
            "outcome": "clicked",
            "error": None,
            "verdict": None,
            "calls": [_call("policy", '{"action": "click_element"} <img src=x onerror=alert(1)>')],
            "timings": timings,
        },
        {
            **base,
            "index": 2,
            "kind": "action",
            "url": "http://127.0.0.1:1/cart",
            "title": "Cart",
            "screenshot": "step_002.jpg",
            "events": ["dialog: alert('hi')"],
            "unchanged": True,
            "repeated": 3,
            "context": {"policy": {"progress": "WARNING: you have done the same action <b>3 times</b>"}},
            "thought": "Type the coupon",
            "action": {"action": "write_element", "element": "coupon", "content": "X&Y", "press_enter": True},
            "outcome": "",
            "error": "LocalizerError: no element matched 'coupon'",
            "verdict": None,
            "calls": [],
            "timings": timings,
        },
        {
            **base,
            "index": 3,
            "kind": "final",
            "url": "http://127.0.0.1:1/done",
            "title": "Done",
            "screenshot": "step_003.png",
            "thought": "Done",
            "action": {"action": "answer", "content": XSS},
            "outcome": "answered",
            "error": None,
            "verdict": {"success": True, "feedback": "The answer matches the page"},
            "calls": [_call("validator", "yes")],
            "timings": timings,
        },
    ]


def _result(success: bool = True) -> dict[str, Any]:
    role = {"calls": 2, "prompt_tokens": 1800, "completion_tokens": 80, "latency_s": 1.6}
    return {
        "success": success,
        "answer": XSS,
        "stop_reason": "answered",
        "message": "validator accepted the answer",
        "url": "http://127.0.0.1:1/shop",
        "final_url": "http://127.0.0.1:1/done",
        "goal": "Buy the red thing & report the total",
        "steps": 3,
        "attempts": 1,
        "feedback": ["The answer matches the page"],
        "usage": {"policy": role, "localizer": role, "validator": role},
        "duration_s": 5.25,
        "model_s": 3.1,
        "browser_s": 1.2,
        "output_dir": None,
        "started_at": "2025-01-01T00:00:00Z",
    }


def _make_run(tmp_path: Path, *, result: bool = True, truncated: bool = False) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "step_001.png").write_bytes(_image("PNG", "red"))
    (run / "step_002.jpg").write_bytes(_image("JPEG", "blue"))
    (run / "step_003.png").write_bytes(_image("PNG", "green"))
    lines = [json.dumps(s) for s in _steps()]
    text = "\n".join(lines) + "\n"
    if truncated:
        text += lines[0][: len(lines[0]) // 2]  # an interrupted write
    (run / "trajectory.jsonl").write_text(text, encoding="utf-8")
    if result:
        (run / "result.json").write_text(json.dumps(_result()), encoding="utf-8")
    return run


def test_report_is_self_contained_and_escaped(tmp_path: Path) -> None:
    run = _make_run(tmp_path)
    path = render_report(run)
    assert path == run / "report.html"
    page = path.read_text(encoding="utf-8")
    assert not list(run.glob(".report-*")), "the temp file is gone"
    assert 'src="http' not in page and "url(" not in page
    # The only links are within the page: the step list to each step, each step back to the list.
    links = re.findall(r'href="([^"]*)"', page)
    assert links == ["#step-1", "#step-2", "#step-3", "#steps", "#steps", "#steps"]
    assert all(f'id="{link[1:]}"' in page for link in links)
    assert all(src.startswith("data:image/") for src in re.findall(r'src="([^"]*)"', page))
    assert page.count('src="data:image/png;base64,') == 2
    assert page.count('src="data:image/jpeg;base64,') == 1
    assert "<script" not in page.lower() and "<img src=x" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'id="verdict" class="pass">PASS<' in page
    assert page.count('class="step') == 3 and 'id="step-3"' in page
    assert page.count('class="click-marker"') == 1
    assert "left:75.0000%;top:30.0000%" in page
    assert 'class="error"' in page and "LocalizerError" in page
    assert "Buy the red thing &amp; report the total" in page
    assert "dialog: alert(&#x27;hi&#x27;)" in page
    assert "<details>" in page and "incomplete" not in page
    # The header's times say what they are; the click point says which coordinates are which.
    assert "<dt>Model time</dt><dd>3.10 s waiting for the models&#x27; replies (all roles)</dd>" in page
    assert "<dt>Browser time</dt><dd>1.20 s in the browser (screenshots, actions, pages loading)</dd>" in page
    assert (
        "(300, 75) on the screenshot sent to the localizer, 400×250 px (where the ring is drawn); "
        "(600, 150) in the page&#x27;s viewport, CSS pixels (where the browser clicked)"
    ) in page
    # The step list: each step in a few words, its outcome, the accepted answer and the error marked.
    nav = page[page.index('<nav class="toc"') : page.index("</nav>")]
    assert '<li class=""><a href="#step-1">click_element &quot;red Buy button&quot;</a> — clicked</li>' in nav
    assert '<li class="bad"><a href="#step-2">write_element &quot;coupon&quot;</a> — LocalizerError' in nav
    assert '<li class="ok"><a href="#step-3">answer &quot;&lt;script&gt;' in nav
    # Each screenshot is a thumbnail that opens full size (a checkbox in its label, no script).
    assert page.count('<label class="frame"') == 3 and page.count('<input type="checkbox" class="zoom">') == 3
    # Step 2 saw the page unchanged after the same action, three times.
    step2 = page[page.index('id="step-2"') : page.index('id="step-3"')]
    assert 'class="tag unchanged"' in step2 and "same action 3× without effect" in step2
    assert "WARNING: you have done the same action &lt;b&gt;3 times&lt;/b&gt;" in step2
    assert page.count('class="tag unchanged"') == 1 and page.count('class="tag repeated"') == 1
    # Streamed to disk part by part, it is the very page render_report_html builds in memory.
    assert path.read_bytes() == render_report_html(*load_run(run)).encode()
    embedded = re.findall(r'src="data:image/[a-z]+;base64,([^"]*)"', page)
    assert sorted(map(base64.b64decode, embedded)) == sorted(p.read_bytes() for p in run.glob("step_*"))


def test_missing_result_and_truncated_line(tmp_path: Path) -> None:
    run = _make_run(tmp_path, result=False, truncated=True)
    result, steps, images = load_run(run)
    assert result is None and [s["index"] for s in steps] == [1, 2, 3] and len(images) == 3
    page = render_report(run).read_text(encoding="utf-8")
    assert 'id="incomplete"' in page and "Run incomplete" in page
    assert 'id="verdict" class="fail">FAIL<' in page
    assert page.count('class="step') == 3
    assert "<script" not in page.lower()


def test_pure_core_handles_odd_input() -> None:
    steps: list[dict[str, Any]] = [
        {"index": 1, "url": "u", "screenshot": "../../etc/passwd", "point": {"image": [1, 2]}},
        {"index": 2, "url": "u", "image_size": [0, 0], "point": "bad", "action": "bad"},
        {"index": 3, "url": "u", "unchanged": True, "repeated": 1e999, "context": {"policy": {"progress": ["x"]}}},
    ]
    page = render_report_html({"success": False}, steps, {})
    assert 'id="verdict" class="fail">FAIL<' in page
    assert 'class="click-marker"' not in page
    assert page.count('class="step') == 3 and "missing" in page
    assert 'class="tag unchanged"' in page and 'class="tag repeated"' not in page


@pytest.mark.browser
async def test_report_in_real_chromium(tmp_path: Path, browser: Browser) -> None:
    run = _make_run(tmp_path)
    url = render_report(run).as_uri()
    for width in (1280, 520):  # the image is scaled up, then down; the marker must follow
        page = await browser.new_page(viewport={"width": width, "height": 900})
        requests: list[str] = []
        page.on("request", lambda r, seen=requests: seen.append(r.url))
        await page.goto(url)
        assert requests == [url], "no request besides the page itself"
        assert (await page.locator("#verdict").inner_text()).strip() == "PASS"
        assert await page.locator(".step").count() == 3
        loaded = await page.eval_on_selector_all("img", "imgs => imgs.map(i => i.complete && i.naturalWidth > 0)")
        assert loaded == [True, True, True]
        marker = page.locator("#step-1 .click-marker")
        img = await page.locator("#step-1 img").bounding_box()
        box = await marker.bounding_box()
        assert img is not None and box is not None
        assert await marker.is_visible()
        expected_x = img["x"] + CLICK[0] / W * img["width"]
        expected_y = img["y"] + CLICK[1] / H * img["height"]
        assert abs(box["x"] + box["width"] / 2 - expected_x) <= 3
        assert abs(box["y"] + box["height"] / 2 - expected_y) <= 3
        if width == 1280:
            assert img["width"] == pytest.approx(360, abs=1)  # a thumbnail: several steps on a screen
            shot = tmp_path / "report.png"
            await page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 1000
            # Clicked, it opens full size over the page, its marker still on the click; again, it closes.
            await page.locator("#step-1 .frame").click()
            full = await page.locator("#step-1 img").bounding_box()
            box = await marker.bounding_box()
            assert full is not None and box is not None
            assert full["width"] == pytest.approx(W, abs=1) and full["height"] == pytest.approx(H, abs=1)
            assert abs(box["x"] + box["width"] / 2 - (full["x"] + CLICK[0])) <= 3
            assert abs(box["y"] + box["height"] / 2 - (full["y"] + CLICK[1])) <= 3
            await page.locator("#step-1 .view").click()  # the picture over the page, anywhere on it
            closed = await page.locator("#step-1 img").bounding_box()
            assert closed is not None and closed["width"] == pytest.approx(360, abs=1)
            # The step list jumps to a step.
            await page.locator('nav.toc a[href="#step-3"]').click()
            assert page.url.endswith("#step-3") and await page.locator("#step-3").is_visible()
        await page.close()
