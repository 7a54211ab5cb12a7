"""``webagent test`` for real: suites, JUnit, the suite report in a browser, traces, the replay cache, budgets."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser

from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer, sites_dir

from ..conftest import TASKS
from .test_cli import role_flags, webagent

pytestmark = pytest.mark.e2e

PRICE = "Find the price of the Blue Widget in the local product catalog and answer with the price."
RED = "What does the Red Gadget cost? Give the price with its currency."


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModelServer]:
    server = FakeModelServer(TASKS / "scripts" / "local.json")
    server.start_in_thread()
    yield server
    server.stop_thread()


def suite_file(tmp_path: Path, *checks: str, name: str = "local smoke") -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(f"name: {name}\nenv: [SITE]\ndefaults: {{max_steps: 8}}\nchecks:\n" + "".join(checks))
    return path


def check(name: str, goal: str, *extra: str) -> str:
    return f"  - name: {name}\n    url: ${{SITE}}/catalog/\n    goal: {goal}\n" + "".join(f"    {e}\n" for e in extra)


def run_test(suite: Path, site: SiteServer, fake: FakeModelServer, *args: str) -> tuple[int, str, str]:
    proc = webagent("test", str(suite), *args, *role_flags(fake), env={"SITE": site.url}, timeout=180)
    return proc.returncode, proc.stdout, proc.stderr


def check_junit_trace_summary(out: Path, junit: Path) -> None:
    root = ET.parse(junit).getroot()
    assert junit.read_bytes() == (out / "junit.xml").read_bytes()
    ts = root.find("testsuite")
    assert ts is not None and ts.get("name") == "local smoke"
    assert (ts.get("tests"), ts.get("failures"), ts.get("errors")) == ("2", "1", "0")
    cases = {c.get("name"): c for c in ts.findall("testcase")}
    assert cases["blue widget"].find("failure") is None
    failure = cases["red gadget first answer"].find("failure")
    assert failure is not None and "Include the currency symbol in the price." in (failure.get("message") or "")
    attached = [
        line.removeprefix("[[ATTACHMENT|").removesuffix("]]")
        for line in (cases["red gadget first answer"].findtext("system-out") or "").split()
    ]
    assert {Path(p).name for p in attached} == {"report.html", "trace.zip"}
    assert all(Path(p).is_file() for p in attached)
    trace = next(Path(p) for p in attached if p.endswith("trace.zip"))
    with zipfile.ZipFile(trace) as z:
        assert any(n.endswith(".trace") for n in z.namelist())  # what `playwright show-trace` opens
    assert not list((out / "runs").glob("blue*/attempt-1/trace.zip"))  # passing checks keep no trace

    summary = json.loads((out / "suite.json").read_text())
    assert (summary["checks"], summary["passed"], summary["failed"]) == (2, 1, 1)
    assert summary["model_calls"] == 12 and summary["replayed_steps"] == 0


async def test_suite_verdicts_junit_report_and_traces(
    fake: FakeModelServer, site: SiteServer, browser: Browser, tmp_path: Path
) -> None:
    suite = suite_file(
        tmp_path,
        check("blue widget", PRICE, "expect: the Blue Widget product page is shown"),
        check("red gadget first answer", RED, "max_attempts: 1"),
    )
    out, junit = tmp_path / "out", tmp_path / "reports" / "junit.xml"
    code, stdout, stderr = run_test(suite, site, fake, "--output", str(out), "--junit", str(junit))
    assert code == 1, stderr
    lines = stdout.splitlines()
    assert lines[0].startswith("PASS  blue widget") and lines[1].startswith("FAIL  red gadget first answer")
    assert "Include the currency symbol" in lines[1] and "1/2 checks passed" in lines[2]
    # Progress on stderr, as "test:" lines: what it does before the first step ends, then counts.
    progress = [line for line in stderr.splitlines() if line.startswith(("test:", "batch:"))]
    assert progress[:2] == [
        "test: 2 checks to run (0 done before): launching the browser...",
        "test: runs started: opening their pages, then asking the models (a progress line as steps end)",
    ]
    assert len(progress) > 2 and all(line.startswith("test: ") for line in progress)
    assert "/2 done" in progress[2]

    validator_texts = [r.text for r in fake.requests if r.role == "validator"]
    assert any("the Blue Widget product page is shown" in t for t in validator_texts)  # expect reached it

    check_junit_trace_summary(out, junit)

    page = await browser.new_page()
    try:
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        await page.goto((out / "report.html").as_uri())
        assert await page.inner_text("#verdict") == "1/2 passed"
        assert await page.locator("details.check").count() == 2
        assert await page.locator("details.check[open]").count() == 1  # the failure is opened
        assert await page.locator("details.check[open] > summary").inner_text() == "FAIL red gadget first answer"
        await page.locator("details.check:not([open]) > summary").click()  # expand the passing one
        sizes = await page.eval_on_selector_all("details.check img", "imgs => imgs.map(i => i.naturalWidth)")
        assert len(sizes) == 6 and all(w > 0 for w in sizes)  # every step's screenshot decodes
        assert await page.locator(".click-marker").count() == 4
        assert not errors
    finally:
        await page.close()


def test_replay_cache_zero_calls_on_an_unchanged_site_and_self_heals(fake: FakeModelServer, tmp_path: Path) -> None:
    root = tmp_path / "sites"
    shutil.copytree(sites_dir(), root)
    suite = suite_file(tmp_path, check("blue widget", PRICE, "expect: the Blue Widget product page is shown"))
    cache, out = tmp_path / "smoke.cache.json", tmp_path / "out"

    def run(site: SiteServer) -> tuple[dict[str, object], int]:
        before = len(fake.requests)
        code, _, stderr = run_test(suite, site, fake, "--cache", str(cache), "--output", str(out), "-q")
        assert code == 0, stderr
        return json.loads((out / "suite.json").read_text()), len(fake.requests) - before

    with SiteServer(root=root) as site:
        recorded, calls = run(site)
        assert calls == 6 and recorded["replayed_steps"] == 0 and cache.is_file()
        text = cache.read_text()
        replayed, calls = run(site)
    assert calls == 0 and replayed["model_calls"] == 0  # the whole suite passes with zero model calls
    assert replayed["replayed_steps"] == 3 and replayed["calls_saved"] == 6
    assert cache.read_text() == text  # nothing changed, nothing rewritten

    with SiteServer(root=root) as moved:  # another port: fingerprints hold same-origin paths
        _, calls = run(moved)
        assert calls == 0
        index = root / "catalog" / "index.html"
        index.write_text(index.read_text().replace("</body>", "<p>Spring sale: everything ships free</p></body>"))
        healed, calls = run(moved)
        assert calls == 6 and healed["replayed_steps"] == 0 and cache.read_text() != text  # re-planned, updated
        steps = [json.loads(line) for line in next((out / "runs").glob("*/attempt-1/trajectory.jsonl")).open()]
        assert [s["replayed"] for s in steps] == [False, False, False]
        assert "re-planned by the models" in (out / "report.html").read_text()
        _, calls = run(moved)
        assert calls == 0  # the healed cache replays again


def test_suite_budget_stops_checks(fake: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    suite = suite_file(tmp_path, check("blue widget", PRICE))
    out = tmp_path / "out"
    code, _, stderr = run_test(suite, site, fake, "--output", str(out), "--suite-budget-calls", "2", "-q")
    assert code == 1, stderr
    result = json.loads((out / "results.jsonl").read_text())
    assert result["stop_reason"] == "budget" and "suite's budget of 2 model calls is spent" in result["message"]
    failure = ET.parse(out / "junit.xml").getroot().find("testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "budget"


def test_bad_suite_and_rerun_rules(fake: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("checks:\n  - name: a\n    url: http://127.0.0.1/\n    gaol: typo\n")
    out = tmp_path / "out"
    code, stdout, stderr = run_test(bad, site, fake, "--output", str(out))
    assert code == 2 and not stdout and not out.exists()
    assert stderr.strip().count("\n") == 0 and "bad.yaml:2: check 'a': unknown key 'gaol'" in stderr

    (out).mkdir()
    (out / "results.jsonl").write_text("")  # someone else's results, not a finished suite run
    suite = suite_file(tmp_path, check("blue widget", PRICE))
    code, _, stderr = run_test(suite, site, fake, "--output", str(out))
    assert code == 2 and "--resume" in stderr


def test_run_with_a_cache_replays(fake: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    cache = tmp_path / "run.cache.json"
    args = ["run", "--url", site.url + "/catalog/", "--goal", PRICE, "--cache", str(cache), *role_flags(fake)]
    first = webagent(*args, "--output", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    before = len(fake.requests)
    second = webagent(*args, "--output", str(tmp_path / "b"), "--json")
    assert second.returncode == 0, second.stderr
    assert len(fake.requests) == before
    result = json.loads(second.stdout)
    assert result["replayed_steps"] == 3 and result["calls_saved"] == 6 and result["answer"] == "$12.50"
    assert "3 steps replayed (6 model calls saved)" in second.stderr


def test_sigterm_mid_suite_then_resume(site: SiteServer, tmp_path: Path) -> None:
    from .test_batch_cli import complete_lines, env, result_lines, start_server, wait_until

    gen = start_server({**json.loads((TASKS / "scripts" / "local.json").read_text()), "latency_s": {"policy": 0.1}})
    slow = next(gen)
    try:
        checks = [check(f"price {i}", PRICE) for i in range(4)]
        suite = suite_file(tmp_path, *checks)
        out = tmp_path / "out"
        args = [sys.executable, "-m", "webagent", "test", str(suite), "--output", str(out), "--concurrency", "1"]
        proc = subprocess.Popen(
            [*args, *role_flags(slow)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env(), "SITE": site.url},
        )
        try:
            wait_until(lambda: complete_lines(out) >= 1, 60, "a finished check", proc)
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130, stderr
        assert "Traceback" not in stderr and "--resume" in stderr
        first = result_lines(out)
        assert 1 <= len(first) < 4
        skipped = ET.parse(out / "junit.xml").getroot().findall("testsuite/testcase/skipped")
        assert len(skipped) == 4 - len(first)  # the JUnit file is consistent: not-run checks are skipped

        done = subprocess.run(
            [*args, "--resume", "-q", *role_flags(slow)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**env(), "SITE": site.url},
        )
        assert done.returncode == 0, done.stderr
        rows = result_lines(out)
        assert len(rows) == 4 and rows[: len(first)] == first
        assert json.loads((out / "suite.json").read_text())["passed"] == 4
    finally:
        gen.close()


def test_a_secret_value_in_a_suite_and_an_output_file_are_refused(
    fake: FakeModelServer, site: SiteServer, tmp_path: Path
) -> None:
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "env: [SITE, PW]\nchecks:\n  - name: login\n    url: ${SITE}/form/\n    goal: Log in with password ${PW}\n"
    )
    proc = webagent(
        "test", str(suite), "--output", str(tmp_path / "out"), *role_flags(fake),
        env={"SITE": site.url, "PW": "hunter2-value", "WEBAGENT_SECRET_PW": "hunter2-value"},
    )  # fmt: skip
    assert proc.returncode == 2 and "holds the value of a secret" in proc.stderr
    assert "hunter2-value" not in proc.stderr and not (tmp_path / "out").exists()
    (tmp_path / "file").write_text("")
    proc = webagent("test", str(suite), "--output", str(tmp_path / "file"), *role_flags(fake), env={"SITE": site.url})
    assert proc.returncode == 2 and "is a file" in proc.stderr and proc.stderr.count("\n") == 1


def test_a_suite_reads_only_the_variables_it_declares_and_their_values_are_written_nowhere(
    site: SiteServer, tmp_path: Path
) -> None:
    who = "ada-lovelace-7719"
    env = {"SITE": site.url, "WHO": who, "OPERATOR_HOME": "/home/operator/.ssh"}
    undeclared = tmp_path / "undeclared.yaml"
    undeclared.write_text(
        f"env: [SITE]\nchecks:\n  - name: a\n    url: ${{SITE}}/catalog/\n    goal: {PRICE} ${{OPERATOR_HOME}}\n"
    )
    proc = webagent("test", str(undeclared), "--output", str(tmp_path / "no"), env=env)
    assert proc.returncode == 2, proc.stderr
    assert "${OPERATOR_HOME} reads an environment variable the suite does not declare" in proc.stderr
    assert "/home/operator" not in proc.stderr and not (tmp_path / "no").exists()

    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: variables\nenv: [SITE, WHO]\ndefaults: {max_steps: 8}\nchecks:\n"
        f"  - name: blue widget\n    url: ${{SITE}}/catalog/?asked_by=${{WHO}}\n    goal: {PRICE} (for ${{WHO}})\n"
    )
    out = tmp_path / "out"
    server = FakeModelServer(TASKS / "scripts" / "local.json", keep_raw=True)
    server.start_in_thread()
    try:
        proc = webagent("test", str(suite), "--output", str(out), *role_flags(server), env=env, timeout=180)
    finally:
        server.stop_thread()
    assert proc.returncode == 0, proc.stderr[-3000:]
    values = (who, site.url, f"127.0.0.1:{site.port}")
    written = [p for p in out.rglob("*") if p.is_file()]
    names = {p.name for p in written}
    assert {"results.jsonl", "junit.xml", "report.html", "suite.json", "result.json", "trajectory.jsonl"} <= names
    for path in written:
        if path.suffix in (".jpg", ".png", ".zip"):
            continue
        text = path.read_text(errors="replace")
        assert not [v for v in values if v in text], path
    assert not [v for v in values if v in proc.stdout + proc.stderr]
    assert server.raw and not [v for raw in server.raw for v in values if v.encode() in raw]
    assert b"(for ${WHO})" in b"".join(server.raw)  # the scan reads the requests' text: the goal, redacted
    row = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert row["url"] == "${SITE}/catalog/?asked_by=${WHO}" and row["success"]
