"""JUnit XML from suite outcomes, parsed back."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from webagent.batch import AttemptRecord, TaskResult
from webagent.records import Usage
from webagent.suite.junit import write_junit
from webagent.suite.model import Check, Suite
from webagent.suite.runner import CheckOutcome


def result(name: str, *, success: bool, stop: str = "answered", feedback: str = "", message: str = "") -> TaskResult:
    record = AttemptRecord(
        attempt=1,
        success=success,
        answer="an \x07answer",
        stop_reason=stop,
        message=message,
        steps=2,
        duration_s=1.5,
        output_dir=f"runs/{name}/attempt-1",
        feedback=[feedback] if feedback else [],
    )
    return TaskResult(
        id=name,
        url="http://x.test/",
        goal="g",
        success=success,
        answer=record.answer,
        stop_reason=stop,
        message=message,
        attempts=1,
        attempt_records=[record],
        steps=2,
        usage=Usage(),
        cost_usd=0.0,
        duration_s=1.5,
        retried=False,
    )


def test_junit_round_trip(tmp_path: Path) -> None:
    checks = [Check(name=n, url="http://x.test/", goal="g", line=i) for i, n in enumerate(["ok", "bad", "err", "cut"])]
    suite = Suite(name="s", path="suite.yaml", checks=checks)
    (tmp_path / "runs" / "bad" / "attempt-1").mkdir(parents=True)
    (tmp_path / "runs" / "bad" / "attempt-1" / "report.html").write_text("<html></html>")
    items = [
        CheckOutcome(check=checks[0], result=result("ok", success=True, feedback="fine")),
        CheckOutcome(check=checks[1], result=result("bad", success=False, feedback="Wrong \x1b[31mcolour")),
        CheckOutcome(check=checks[2], result=result("err", success=False, stop="error", message="site down")),
        CheckOutcome(check=checks[3]),  # not run: interrupted
    ]
    path = write_junit(tmp_path / "j.xml", suite, items, tmp_path)
    ts = ET.parse(path).getroot().find("testsuite")
    assert ts is not None
    assert (ts.get("tests"), ts.get("failures"), ts.get("errors"), ts.get("skipped")) == ("4", "1", "1", "1")
    ok, bad, err, cut = ts.findall("testcase")
    assert ok.find("failure") is None and ok.find("error") is None and ok.get("time") == "1.500"
    failure = bad.find("failure")
    assert failure is not None and failure.get("message", "").startswith("Wrong [31mcolour")  # control chars cleaned
    assert (bad.findtext("system-out") or "").strip() == f"[[ATTACHMENT|{tmp_path / 'runs/bad/attempt-1/report.html'}]]"
    error = err.find("error")
    assert error is not None and error.get("message") == "error: site down"
    assert cut.find("skipped") is not None
    props = {p.get("name"): p.get("value") for p in bad.iter("property")}
    assert props["stop_reason"] == "answered" and props["answer"] == "an answer" and props["url"] == "http://x.test/"
