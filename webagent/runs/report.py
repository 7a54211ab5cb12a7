"""A self-contained HTML report of one run: header, usage, a list of the steps to jump from, and one
card per step with a thumbnail of its screenshot.

``render_report(run_dir)`` reads ``result.json``, ``trajectory.jsonl`` and the screenshots beside them and
writes ``run_dir/report.html`` atomically. The page needs no network and no JavaScript: screenshots are
embedded as ``data:`` URLs, the CSS is inline, and every piece of text is HTML-escaped (page titles,
answers and model replies are untrusted). A thumbnail opens full size over the page when clicked (a
checkbox in its label, styled by ``:checked``; again to close). Click points are drawn as
``.click-marker`` rings positioned in percentages of the image, so they stay right at any displayed size.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..files.disk import write_atomic_parts
from ..records import ROLES

__all__ = ["CSP", "CSS", "escape", "load_run", "render_report", "render_report_html", "step_html"]

USAGE_FIELDS = ("calls", "prompt_tokens", "completion_tokens", "latency_s", "retries", "repairs", "failures")
TIMING_FIELDS = ("observe_s", "policy_s", "localize_s", "act_s", "validate_s", "total_s")

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;padding:16px 24px;background:#f4f5f7;color:#1d1f23}
h1{font-size:20px;margin:0 0 8px}h2{font-size:16px;margin:0 0 8px}
header,.step{background:#fff;border:1px solid #d8dbe0;border-radius:8px;padding:14px 18px;margin:0 0 16px}
#verdict{display:inline-block;font-size:28px;font-weight:700;padding:4px 18px;border-radius:6px;color:#fff}
#verdict.pass{background:#1f883d}#verdict.fail{background:#cf222e}
.banner{background:#fff8c5;border:1px solid #d4a72c;border-radius:6px;padding:8px 12px;margin:8px 0;
 font-weight:600}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:8px 0}dt{color:#59636e}
dd{margin:0;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #d8dbe0;padding:2px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}
.error{background:#ffebe9;border:1px solid #cf222e;color:#82071e;border-radius:4px;padding:4px 8px}
.ok{color:#1f883d;font-weight:600}.bad{color:#cf222e;font-weight:600}
code,pre{font:12px/1.4 ui-monospace,monospace}
pre{white-space:pre-wrap;background:#f6f8fa;padding:6px;margin:4px 0}
.step h2 a{font-size:12px;font-weight:400;margin-left:8px}
.card{display:flex;flex-wrap:wrap;gap:4px 20px;align-items:flex-start}.card>dl{flex:1 1 380px;min-width:0}
.frame{display:block;width:fit-content;max-width:100%;margin-top:8px;cursor:zoom-in}
.zoom{position:absolute;opacity:0;width:0;height:0;pointer-events:none}
.shot{position:relative;display:inline-block;width:360px;max-width:100%;line-height:0}
.shot img{width:100%;display:block;border:0;outline:1px solid #d8dbe0}
.zoom:checked+.view{position:fixed;inset:0;z-index:10;display:flex;align-items:center;justify-content:center;
 background:rgba(0,0,0,.85);cursor:zoom-out}
.zoom:checked+.view .shot{width:auto;max-width:none}
.zoom:checked+.view img{width:auto;max-width:100vw;max-height:100vh}
.zoom:focus-visible+.view .shot{outline:2px solid #0969da}
nav.toc ol{margin:4px 0;padding-left:28px;columns:2 360px}nav.toc li{break-inside:avoid}
nav.toc .bad,nav.toc .ok{font-weight:400}
.click-marker{position:absolute;width:30px;height:30px;transform:translate(-50%,-50%);box-sizing:border-box;
 border:3px solid #ff1f1f;border-radius:50%;box-shadow:0 0 0 2px #fff,0 0 0 3px rgba(0,0,0,.45);
 pointer-events:none}
.click-marker::after{content:"";position:absolute;left:50%;top:50%;width:6px;height:6px;
 transform:translate(-50%,-50%);border-radius:50%;background:#ff1f1f}
.muted{color:#59636e}
.tag{font-size:12px;font-weight:600;border-radius:10px;padding:1px 8px;vertical-align:middle}
.tag.replayed{background:#ddf4ff;color:#0550ae}.tag.replanned{background:#fff1e5;color:#953800}
.tag.unchanged{background:#eaeef2;color:#424a53}.tag.repeated{background:#ffebe9;color:#82071e}
"""
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def escape(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _secs(value: object) -> str:
    n = _num(value)
    return "—" if n is None else f"{n:.2f} s"


def _mime(data: bytes, name: str) -> str:
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"\xff\xd8"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "image/png" if name.lower().endswith(".png") else "image/jpeg"


def _dl(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in rows if v)
    return f"<dl>{body}</dl>" if body else ""


def _usage_table(usage: dict[str, Any]) -> str:
    head = "".join(f"<th>{escape(f.replace('_', ' '))}</th>" for f in USAGE_FIELDS)
    rows = []
    for role in ROLES:
        u = usage.get(role)
        if not isinstance(u, dict):
            continue
        cells = "".join(
            f"<td>{_secs(u.get(f)) if f == 'latency_s' else escape(u.get(f, 0))}</td>" for f in USAGE_FIELDS
        )
        rows.append(f"<tr><td>{escape(role)}</td>{cells}</tr>")
    return f'<table class="usage"><tr><th>role</th>{head}</tr>{"".join(rows)}</table>' if rows else ""


def _usage_from_steps(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Sum per-call usage when ``result.json`` is missing."""
    total: dict[str, dict[str, float]] = {}
    for step in steps:
        for call in step.get("calls") or []:
            if not isinstance(call, dict) or not isinstance(call.get("usage"), dict):
                continue
            acc = total.setdefault(str(call.get("role", "?")), dict.fromkeys(USAGE_FIELDS, 0.0))
            for f in USAGE_FIELDS:
                acc[f] += _num(call["usage"].get(f)) or 0.0
    return {r: {f: (v if f == "latency_s" else int(v)) for f, v in u.items()} for r, u in total.items()}


def _action_html(action: object) -> str:
    if not isinstance(action, dict):
        return ""
    args = ", ".join(
        f"{escape(k)}={escape(json.dumps(v, ensure_ascii=False))}" for k, v in action.items() if k != "action"
    )
    return f"<code><b>{escape(action.get('action', '?'))}</b>({args})</code>"


def _acts_html(step: dict[str, Any]) -> str:
    """The step's action, or its list of actions (several a turn), each with where it acted and what it did."""
    acted = step.get("actions")
    if not isinstance(acted, list) or not acted:
        return _action_html(step.get("action"))
    items = []
    for act in (a for a in acted if isinstance(a, dict)):
        at = _pair(_dict(act.get("point")).get("viewport"))
        to = _pair(_dict(act.get("target_point")).get("viewport"))
        where = (f" at ({at[0]:.0f}, {at[1]:.0f})" if at else "") + (f" to ({to[0]:.0f}, {to[1]:.0f})" if to else "")
        items.append(f"<li>{_action_html(act.get('action'))}{escape(where)} — {escape(act.get('outcome', ''))}</li>")
    return f"<ol>{''.join(items)}</ol>"


def _pair(value: object) -> tuple[float, float] | None:
    if isinstance(value, list | tuple) and len(value) == 2:
        x, y = _num(value[0]), _num(value[1])
        if x is not None and y is not None:
            return x, y
    return None


def _shot_parts(step: dict[str, Any], images: dict[str, bytes]) -> list[str | bytes]:
    """The screenshot card: its base64 stays bytes (the largest part of a report by far), so
    ``render_report`` writes it as it is instead of copying it into ever larger strings."""
    name = step.get("screenshot")
    data = images.get(name) if isinstance(name, str) else None
    if data is None:
        return [f'<p class="muted">No screenshot{f" ({escape(name)} missing)" if name else ""}.</p>']
    marker = ""
    point = step.get("point")
    size = _pair(step.get("image_size"))
    xy = _pair(point.get("image")) if isinstance(point, dict) else None
    if xy and size and size[0] > 0 and size[1] > 0:
        left = min(max(xy[0] / size[0] * 100, 0.0), 100.0)
        top = min(max(xy[1] / size[1] * 100, 0.0), 100.0)
        title = escape(f"click at ({xy[0]:g}, {xy[1]:g})")
        marker = f'<span class="click-marker" title="{title}" style="left:{left:.4f}%;top:{top:.4f}%"></span>'
    alt = escape(f"Screenshot of step {step.get('index', '?')}")
    return [
        '<label class="frame" title="Click to see it full size; click again to close">'
        '<input type="checkbox" class="zoom"><span class="view"><span class="shot">'
        f'<img src="data:{_mime(data, str(name))};base64,',
        base64.b64encode(data),
        f'" alt="{alt}">{marker}</span></span></label>',
    ]


def _join(parts: Iterable[str | bytes]) -> str:
    return "".join(p if isinstance(p, str) else p.decode("ascii") for p in parts)


def _calls_html(calls: object) -> str:
    if not isinstance(calls, list) or not calls:
        return ""
    parts = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        u = _dict(call.get("usage"))
        meta = f"{call.get('role', '?')} · {call.get('model', '?')} · {_secs(u.get('latency_s'))}"
        err = f'<div class="error">{escape(call["error"])}</div>' if call.get("error") else ""
        raws = "".join(f"<pre>{escape(r)}</pre>" for r in call.get("raw") or [])
        parts.append(f"<div><b>{escape(meta)}</b>{err}{raws}</div>")
    return f"<details><summary>Raw model replies ({len(parts)} model calls)</summary>{''.join(parts)}</details>"


def _progress_tags(step: dict[str, Any]) -> str:
    """Badges for a step that saw the page as it was before the previous step's action."""
    if step.get("unchanged") is not True:
        return ""
    title = escape("same URL and same screenshot as the step before, after its action")
    tags = f' <span class="tag unchanged" title="{title}">no visible change</span>'
    repeated = step.get("repeated")
    if isinstance(repeated, int) and not isinstance(repeated, bool) and repeated >= 2:
        tags += f' <span class="tag repeated">same action {repeated}× without effect</span>'
    return tags


#: What each coordinate system of a click point is.
POINT_SPACES = {
    "image": "on the screenshot sent to the localizer{size} (where the ring is drawn)",
    "viewport": "in the page's viewport, CSS pixels (where the browser clicked)",
}


def _point_text(step: dict[str, Any]) -> str:
    point = _dict(step.get("point"))
    size = _pair(step.get("image_size"))
    parts = []
    for space, words in POINT_SPACES.items():
        xy = _pair(point.get(space))
        if xy is None:
            continue
        shown = words.format(size=f", {size[0]:g}×{size[1]:g} px" if size and size[0] > 0 else "")
        parts.append(f"({xy[0]:.0f}, {xy[1]:.0f}) {shown}")
    return escape("; ".join(parts))


def _summary(step: dict[str, Any]) -> str:
    """The step in a few words: its action and what it is about."""
    action = step.get("action")
    if not isinstance(action, dict):
        return "no action"
    about = next((action[k] for k in ("element", "content", "url", "key", "direction") if action.get(k)), "")
    text = f"{action.get('action', '?')} {json.dumps(about, ensure_ascii=False) if about else ''}".strip()
    several = step.get("actions")
    if isinstance(several, list) and len(several) > 1:
        text = f"{len(several)} actions: {text}"
    return text if len(text) <= 70 else text[:69] + "…"


def _step_list(steps: list[dict[str, Any]]) -> str:
    """The steps as links to their cards, failures in red, an accepted answer in green."""
    items = []
    for step in steps:
        index = step.get("index", "?")
        idx = int(index) if isinstance(index, int) else escape(index)
        accepted = _dict(step.get("verdict")).get("success")
        cls = "ok" if accepted is True else "bad" if step.get("error") or accepted is False else ""
        outcome = escape(step.get("error") or step.get("outcome") or "")
        outcome = f" — {outcome}" if outcome else ""
        items.append(f'<li class="{cls}"><a href="#step-{idx}">{escape(_summary(step))}</a>{outcome}</li>')
    return f'<nav class="toc" id="steps"><h2>Steps</h2><ol>{"".join(items)}</ol></nav>' if items else ""


def step_html(step: dict[str, Any], images: dict[str, bytes]) -> str:
    """A step's card alone (the suite report's), with no link to a step list."""
    return _join(_step_parts(step, images, toc=False))


def _step_parts(step: dict[str, Any], images: dict[str, bytes], *, toc: bool = True) -> list[str | bytes]:
    index = step.get("index", "?")
    idx = int(index) if isinstance(index, int) else escape(index)
    err = step.get("error")
    verdict = step.get("verdict")
    verdict_html = ""
    if isinstance(verdict, dict):
        ok = verdict.get("success") is True
        label = '<span class="ok">accepted</span>' if ok else '<span class="bad">rejected</span>'
        verdict_html = f"{label} — {escape(verdict.get('feedback', ''))}"
    pt = _point_text(step)
    events = step.get("events") or []
    timings = _dict(step.get("timings"))
    timing_txt = " · ".join(f"{f.removesuffix('_s')} {_secs(timings[f])}" for f in TIMING_FIELDS if f in timings)
    rows = [
        ("URL", escape(step.get("url"))),
        ("Title", escape(step.get("title"))),
        ("Previous action", escape(_dict(_dict(step.get("context")).get("policy")).get("progress"))),
        ("Action", _acts_html(step)),
        ("Element", escape(step.get("element"))),
        ("Click point", f"{pt} — placed by the {escape(step['grounding'])}" if pt and step.get("grounding") else pt),
        ("Released at", _point_text({**step, "point": step.get("target_point")}) if step.get("target_point") else ""),
        ("Thought", escape(step.get("thought"))),
        ("Note", escape(step.get("note"))),
        ("Outcome", escape(step.get("outcome"))),
        ("Error", f'<div class="error">{escape(err)}</div>' if err else ""),
        ("Events", "<ul>" + "".join(f"<li>{escape(ev)}</li>" for ev in events) + "</ul>" if events else ""),
        ("Verdict", verdict_html),
        ("Timings", escape(timing_txt)),
    ]
    cls = "step error-step" if err else "step"
    replay = ""
    if step.get("replayed") is True:
        replay = ' <span class="tag replayed">replayed from cache</span>'
    elif step.get("replayed") is False:
        replay = ' <span class="tag replanned">re-planned by the models</span>'
    tags = replay + _progress_tags(step)
    back = '<a href="#steps">all steps</a>' if toc else ""
    kind = escape(step.get("kind", "action"))
    head = f'<section class="{cls}" id="step-{idx}"><h2>Step {idx} · {kind}{tags}{back}</h2><div class="card">'
    return [head + _dl(rows), *_shot_parts(step, images), "</div>" + _calls_html(step.get("calls")) + "</section>"]


def render_report_html(result: dict[str, Any] | None, steps: list[dict[str, Any]], images: dict[str, bytes]) -> str:
    """Render the report page; ``result`` None or empty means the run was interrupted."""
    return _join(_report_parts(result, steps, images))


def _downloads(kept: object) -> str:
    """The files a run kept of its pages' downloads, by name (no link: a page chose their contents)."""
    items = [_dict(d) for d in kept] if isinstance(kept, list) else []
    return "<br>".join(
        escape(f"downloads/{d.get('name', '')} ({d.get('bytes', 0)} bytes) from {d.get('url', '')}") for d in items
    )


def _report_parts(
    result: dict[str, Any] | None, steps: list[dict[str, Any]], images: dict[str, bytes]
) -> Iterator[str | bytes]:
    res = result or {}
    incomplete = not res
    first = steps[0] if steps else {}
    success = res.get("success") is True
    badge = f'<div id="verdict" class="{"pass" if success else "fail"}">{"PASS" if success else "FAIL"}</div>'
    banner = (
        '<div class="banner" id="incomplete">Run incomplete: no result.json; rendered from the steps alone.</div>'
        if incomplete
        else ""
    )
    stop = f"{res.get('stop_reason', '')}{' — ' if res.get('message') else ''}{res.get('message', '')}"
    answer = res.get("answer")
    rows = [
        ("Goal", escape(res.get("goal", ""))),
        ("Start URL", escape(res.get("url") or first.get("url", ""))),
        ("Final URL", escape(res.get("final_url") or (steps[-1].get("url", "") if incomplete and steps else ""))),
        ("Stop", escape(stop)),
        ("Answer", "<i>none</i>" if not incomplete and answer is None else escape(answer)),
        ("Steps", escape(res.get("steps", len(steps)))),
        ("Attempts", escape(res.get("attempts", ""))),
        ("Clicks placed by", escape(res.get("grounding") or "")),
        ("Duration", _secs(res["duration_s"]) if "duration_s" in res else ""),
        (
            "Model time",
            escape(f"{_secs(res['model_s'])} waiting for the models' replies (all roles)") if "model_s" in res else "",
        ),
        (
            "Browser time",
            f"{_secs(res['browser_s'])} in the browser (screenshots, actions, pages loading)"
            if "browser_s" in res
            else "",
        ),
        ("Started", escape(res.get("started_at", ""))),
        (
            "Replayed",
            escape(f"{res['replayed_steps']} steps, {res.get('calls_saved', 0)} model calls saved")
            if res.get("replayed_steps")
            else "",
        ),
        ("Downloads", _downloads(res.get("downloads"))),
    ]
    usage = _dict(res.get("usage")) or _usage_from_steps(steps)
    feedback = [f for f in res.get("feedback") or [] if f]
    fb_html = (
        "<h2>Validator feedback</h2><ol>" + "".join(f"<li>{escape(f)}</li>" for f in feedback) + "</ol>"
        if feedback
        else ""
    )
    title = escape(f"webagent report — {res.get('goal') or first.get('url', 'run')}")
    yield (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{title}</title><style>{CSS}</style></head><body>"
        f"<header><h1>webagent run</h1>{badge}{banner}{_dl(rows)}{_usage_table(usage)}{fb_html}"
        f"{_step_list(steps)}</header><main>"
    )
    for step in steps:
        yield from _step_parts(step, images)
    yield "</main></body></html>\n"


def load_run(run_dir: Path) -> tuple[dict[str, Any] | None, list[dict[str, Any]], dict[str, bytes]]:
    """Read ``result.json`` (None if missing or unreadable), the steps and their screenshots."""
    result: dict[str, Any] | None = None
    try:
        loaded = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
        result = loaded if isinstance(loaded, dict) else None
    except (OSError, ValueError):
        result = None
    steps: list[dict[str, Any]] = []
    try:
        lines = (run_dir / "trajectory.jsonl").read_text(encoding="utf-8", errors="replace").split("\n")
    except OSError:
        lines = []
    for line in lines:
        try:
            step = json.loads(line)
        except ValueError:
            continue  # a truncated last line of an interrupted run
        if isinstance(step, dict):
            steps.append(step)
    images: dict[str, bytes] = {}
    for step in steps:
        name = step.get("screenshot")
        if isinstance(name, str) and name and name not in images:
            path = run_dir / Path(name).name  # never leave the run directory
            if path.is_file():
                images[name] = path.read_bytes()
    return result, steps, images


def render_report(run_dir: Path, *, private: bool = False) -> Path:
    """Write ``run_dir/report.html`` atomically and return its path (``private``: 0600, as it is
    anyway in a private run directory: ``webagent.files.disk``)."""
    run_dir = Path(run_dir)
    parts = _report_parts(*load_run(run_dir))
    encoded = (p.encode() if isinstance(p, str) else p for p in parts)
    return write_atomic_parts(run_dir / "report.html", encoded, private=private)
