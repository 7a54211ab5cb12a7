"""JUnit XML for a suite run: one ``testcase`` per check.

A failed check carries a ``failure`` whose message is the validator's feedback (or why the run
stopped); its report, trace and run directory are attached the way Jenkins, GitLab and GitHub
reporters read them: ``[[ATTACHMENT|path]]`` lines in ``system-out`` and ``property`` elements.
"""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING

from ..files.disk import write_atomic

if TYPE_CHECKING:
    from .model import CheckOutcome, Suite

__all__ = ["write_junit"]


def _attachments(item: CheckOutcome, output: Path) -> list[tuple[str, Path]]:
    found: list[tuple[str, Path]] = []
    if item.result is None:
        return found
    for record in item.result.attempt_records:
        run_dir = (output / record.output_dir).resolve()
        report = run_dir / "report.html"
        if report.is_file():
            found.append((f"report (attempt {record.attempt})", report))
        if record.trace and Path(record.trace).is_file():
            found.append((f"trace (attempt {record.attempt})", Path(record.trace).resolve()))
    return found


def _clean(text: str) -> str:
    """XML 1.0 cannot hold most control characters, whatever a page or model put in a message."""
    return "".join(c for c in text if c in "\t\n\r" or ord(c) >= 0x20)


def junit_tree(suite: Suite, items: list[CheckOutcome], output: Path) -> ET.ElementTree[ET.Element]:
    apart = ("error", "needs_human")
    failures = sum(1 for o in items if o.result is not None and not o.passed and o.result.stop_reason not in apart)
    errors = sum(1 for o in items if o.result is not None and o.result.stop_reason == "error")
    skipped = sum(1 for o in items if o.result is None or o.result.stop_reason == "needs_human")
    duration = sum(o.result.duration_s for o in items if o.result is not None)
    root = ET.Element("testsuites", name=suite.name, tests=str(len(items)), time=f"{duration:.3f}")
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    ts = ET.SubElement(root, "testsuite", name=suite.name, tests=str(len(items)), time=f"{duration:.3f}")
    ts.set("failures", str(failures))
    ts.set("errors", str(errors))
    ts.set("skipped", str(skipped))
    for item in items:
        check, result = item.check, item.result
        case = ET.SubElement(ts, "testcase", name=_clean(check.name), classname=_clean(suite.name))
        case.set("file", suite.path)
        case.set("line", str(check.line))
        case.set("time", f"{result.duration_s:.3f}" if result else "0")
        props = ET.SubElement(case, "properties")
        values = {"url": check.url, "goal": check.goal, "expect": check.expect or ""}
        if result is not None:
            values |= {
                "stop_reason": result.stop_reason,
                "steps": str(result.steps),
                "replayed_steps": str(result.replayed_steps),
                "calls_saved": str(result.calls_saved),
                "answer": result.answer or "",
            }
        attachments = _attachments(item, output)
        for label, path in attachments:
            values[label] = str(path)
        for key, value in values.items():
            ET.SubElement(props, "property", name=key, value=_clean(value))
        for kept in result.downloads if result is not None else []:  # the files its pages downloaded
            ET.SubElement(
                props, "property", name="download", value=_clean(f"{kept.name} ({kept.bytes} bytes): {kept.path}")
            )
        if result is None:
            ET.SubElement(case, "skipped", message="not run: the suite was interrupted")
        elif result.stop_reason == "needs_human":  # a person was needed (a CAPTCHA, a code): not the site's fault
            ET.SubElement(case, "skipped", message=_clean(f"needs a person: {result.message}"))
        elif not item.passed:
            kind = "error" if result.stop_reason == "error" else "failure"
            node = ET.SubElement(case, kind, message=_clean(item.reason), type=result.stop_reason)
            node.text = _clean(f"{item.reason}\nanswer: {result.answer}\nstopped: {result.message}")
        if attachments:
            out = ET.SubElement(case, "system-out")
            out.text = "".join(f"[[ATTACHMENT|{path}]]\n" for _, path in attachments)
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(target: Path, suite: Suite, items: list[CheckOutcome], output: Path, *, private: bool = False) -> Path:
    """Write the JUnit file atomically (``private``: 0600)."""
    tree = junit_tree(suite, items, output)
    buf = io.BytesIO()
    tree.write(buf, encoding="utf-8", xml_declaration=True)
    return write_atomic(target, buf.getvalue(), private=private)
