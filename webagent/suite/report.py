"""A self-contained HTML report of a whole suite run: a table of checks, then each check's steps.

Like the per-run report it needs no network and no JavaScript (screenshots are ``data:`` URLs,
CSS inline, every text escaped); each check is a ``<details>`` section, open when it failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..files.disk import write_atomic
from ..runs.report import CSP, CSS, escape, load_run, step_html

if TYPE_CHECKING:
    from .model import CheckOutcome, Suite

__all__ = ["render_suite_report", "write_suite_report"]

SUITE_CSS = """
.checks td,.checks th{text-align:left}.pass{color:#1f883d;font-weight:700}.fail{color:#cf222e;font-weight:700}
details.check{background:#fff;border:1px solid #d8dbe0;border-radius:8px;padding:10px 16px;margin:0 0 16px}
details.check>summary{cursor:pointer;font-size:16px;font-weight:600}
details.check .step{border-color:#e5e7eb}
"""


def _check_html(index: int, item: CheckOutcome, output: Path) -> str:
    check, result = item.check, item.result
    status = '<span class="pass">PASS</span>' if item.passed else '<span class="fail">FAIL</span>'
    rows = [("URL", escape(check.url)), ("Goal", escape(check.goal)), ("Expect", escape(check.expect or ""))]
    body = ""
    if result is not None:
        rows += [
            ("Verdict", escape(item.reason)),
            ("Answer", escape(result.answer or "")),
            ("Stop", escape(f"{result.stop_reason} — {result.message}")),
            (
                "Steps",
                escape(f"{result.steps} ({result.replayed_steps} replayed, {result.calls_saved} model calls saved)"),
            ),
            ("Downloads", "<br>".join(escape(f"{d.name} ({d.bytes} bytes): {d.path}") for d in result.downloads)),
        ]
        for record in result.attempt_records:
            run_dir = output / record.output_dir
            if record.trace:
                rows.append(("Trace", escape(f"{record.trace} (open with: playwright show-trace {record.trace})")))
            _, steps, images = load_run(run_dir)
            cards = "".join(step_html(step, images) for step in steps)
            body += f'<h3>Attempt {record.attempt}</h3><div class="attempt">{cards}</div>'
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in rows if v)
    opened = "" if item.passed else " open"
    return (
        f'<details class="check" id="check-{index}" data-passed="{str(item.passed).lower()}"{opened}>'
        f"<summary>{status} {escape(check.name)}</summary><dl>{dl}</dl>{body}</details>"
    )


def render_suite_report(suite: Suite, items: list[CheckOutcome], output: Path, summary: dict[str, Any]) -> str:
    passed = sum(o.passed for o in items)
    ok = passed == len(items)
    badge = f'<div id="verdict" class="{"pass" if ok else "fail"}">{passed}/{len(items)} passed</div>'
    table = "".join(
        f'<tr><td><a href="#check-{i}">{escape(o.check.name)}</a></td>'
        f'<td class="{"pass" if o.passed else "fail"}">{"PASS" if o.passed else "FAIL"}</td>'
        f"<td>{o.result.steps if o.result else 0}</td><td>{o.result.replayed_steps if o.result else 0}</td>"
        f"<td>{escape(o.reason)}</td></tr>"
        for i, o in enumerate(items, start=1)
    )
    totals = (
        f"{summary.get('model_calls', 0)} model calls, {summary.get('calls_saved', 0)} saved by the replay cache "
        f"({summary.get('replayed_steps', 0)} steps replayed), {summary.get('tokens', 0):,} tokens, "
        f"${summary.get('cost_usd', 0.0):.4f}"
    )
    checks = "".join(_check_html(i, o, output) for i, o in enumerate(items, start=1))
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{escape(f'webagent suite — {suite.name}')}</title><style>{CSS}{SUITE_CSS}</style></head><body>"
        f"<header><h1>webagent suite: {escape(suite.name)}</h1>{badge}<p>{escape(totals)}</p>"
        f'<table class="checks"><tr><th>Check</th><th>Result</th><th>Steps</th><th>Replayed</th><th>Verdict</th></tr>'
        f"{table}</table></header><main>{checks}</main></body></html>\n"
    )


def write_suite_report(
    target: Path,
    suite: Suite,
    items: list[CheckOutcome],
    output: Path,
    summary: dict[str, Any],
    *,
    private: bool = False,
) -> Path:
    page = render_suite_report(suite, items, output, summary)
    return write_atomic(target, page, private=private)
