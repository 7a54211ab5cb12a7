"""Kept downloads end to end: the CSV export of ``/hands/export.html`` through ``webagent run``,
``webagent batch``, ``webagent test``, the library in every contract and ``WebEnv``, with the
offline model server; refused, it fails. Bad downloads (a flood, a forbidden host) through a run.
Each checks the file in the run's ``downloads/``, the result that lists it, and that nothing was
written beside the output folder."""

from __future__ import annotations

import json
import re
import stat
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser
from pydantic import SecretStr

from webagent import Agent, WebEnv
from webagent.testing.downloadsite import FILE_BYTE, FLOOD_BYTES, LINK
from webagent.testing.hands import EXPORT, EXPORT_CSV, export_script
from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory
from .test_cli import webagent
from .test_hands import CONTRACTS, config_for, events_of

pytestmark = pytest.mark.e2e

TOLD = f"Downloaded: orders.csv ({len(EXPORT_CSV)} bytes)"


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def told_at(steps: list[dict[str, Any]], text: str) -> list[int]:
    """The steps whose observation told a line holding ``text``: the click's next one, or a later one
    where the browser announced the download after the page settled (a loaded machine)."""
    return [s["index"] for s in steps for e in s["events"] if text in e and "in progress" not in e]


def folder_facts(path: str) -> tuple[bytes, int, int]:
    """A kept file's bytes, its folder's mode and its own."""
    file = Path(path)
    return file.read_bytes(), stat.S_IMODE(file.parent.stat().st_mode), stat.S_IMODE(file.stat().st_mode)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeModelServer]:
    server = FakeModelServer(export_script())
    server.start_in_thread()
    yield server
    server.stop_thread()


def role_flags(server: FakeModelServer) -> list[str]:
    flags = ["--localizer-profile", "holo1.5", "--model", PROFILE_MODELS["holo1.5"], "--api-key", "offline"]
    for role in ("policy", "localizer", "validator"):
        flags += [f"--{role}-base-url", server.base_url(role)]
    return [*flags, "--max-steps", "6", "--max-attempts", "2"]


def test_the_csv_export_through_the_cli(fake: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    out = tmp_path / "runs" / "export"
    before = listing(tmp_path)
    proc = webagent(
        "run", "--url", EXPORT.url(site.url), "--goal", EXPORT.goal, "--output", str(out), "--json", *role_flags(fake)
    )
    assert proc.returncode == 0, proc.stderr
    saved = out / "downloads" / "orders.csv"
    assert saved.read_bytes() == EXPORT_CSV
    result = json.loads(proc.stdout)
    assert result["success"] and result["answer"] == EXPORT.answer
    [listed] = result["downloads"]
    assert listed["name"] == "orders.csv" and listed["bytes"] == len(EXPORT_CSV) and listed["url"].startswith("blob:")
    assert Path(listed["path"]) == saved
    assert json.loads((out / "result.json").read_text())["downloads"] == result["downloads"]
    steps = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    assert told_at(steps, TOLD) == told_at(steps, "orders.csv") and len(told_at(steps, TOLD)) == 1
    assert (
        f"event: {TOLD}" in proc.stderr and f"downloaded: orders.csv ({len(EXPORT_CSV)} bytes): {saved}" in proc.stderr
    )
    assert "downloads/orders.csv (92 bytes)" in (out / "report.html").read_text()
    # Nothing was written but the run folder.
    assert [p for p in listing(tmp_path) if p not in before and not p.startswith("runs/export")] == ["runs"]


def test_refused_the_export_fails_and_nothing_is_kept(fake: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = webagent(
        "run", "--url", EXPORT.url(site.url), "--goal", EXPORT.goal, "--output", str(out), "--json",
        "--downloads", "refuse", *role_flags(fake),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert not result["success"] and result["downloads"] == []
    assert not (out / "downloads").exists()
    steps = [json.loads(line) for line in (out / "trajectory.jsonl").read_text().splitlines()]
    refused = (
        "The page started a download of 'orders.csv'; downloads are refused ([browser] downloads = \"refuse\"), "
        "so it was cancelled."
    )
    assert len(told_at(steps, refused)) == 1 and told_at(steps, refused) == told_at(steps, "orders.csv")


def test_batch_and_suite_results_carry_the_downloads(fake: FakeModelServer, site: SiteServer, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "export", "url": EXPORT.url(site.url), "goal": EXPORT.goal}) + "\n")
    out = tmp_path / "batch"
    proc = webagent("batch", str(tasks), "--output", str(out), *role_flags(fake))
    assert proc.returncode == 0, proc.stderr
    [line] = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert line["success"] and [d["name"] for d in line["downloads"]] == ["orders.csv"]
    assert line["attempt_records"][0]["downloads"] == line["downloads"]
    assert Path(line["downloads"][0]["path"]).read_bytes() == EXPORT_CSV
    assert Path(line["downloads"][0]["path"]).parent == out / "runs" / "export" / "attempt-1" / "downloads"

    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"name: exports\nchecks:\n  - name: export\n    url: {EXPORT.url(site.url)}\n    goal: {EXPORT.goal}\n"
    )
    out = tmp_path / "suite"
    proc = webagent("test", str(suite), "--output", str(out), "--trust-tasks", *role_flags(fake))
    assert proc.returncode == 0, proc.stderr
    [check] = json.loads((out / "suite.json").read_text())["results"]
    assert [d["name"] for d in check["downloads"]] == ["orders.csv"]
    case = ET.parse(out / "junit.xml").getroot().find("testsuite/testcase")
    assert case is not None
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["download"] == f"orders.csv ({len(EXPORT_CSV)} bytes): {check['downloads'][0]['path']}"
    assert "orders.csv (92 bytes)" in (out / "report.html").read_text()


@pytest.mark.parametrize(("family", "grounding", "output"), CONTRACTS)
async def test_the_csv_export_through_the_library_in_each_contract(
    browser: Browser,
    model_server: ServerFactory,
    site: SiteServer,
    tmp_path: Path,
    family: str | None,
    grounding: str,
    output: str,
) -> None:
    site.hand_events.clear()
    async with model_server(export_script()) as server:
        agent = Agent(config_for(server, family, grounding, output), browser=browser)
        try:
            result = await agent.run(EXPORT.url(site.url), EXPORT.goal, output_dir=tmp_path / "run")
            # Without an output folder: a private temporary one, until the agent closes.
            elsewhere = await agent.run(EXPORT.url(site.url), EXPORT.goal)
            assert elsewhere.success and folder_facts(elsewhere.downloads[0].path) == (EXPORT_CSV, 0o700, 0o600)
        finally:
            await agent.aclose()
    assert result.success, result.message
    assert [(d.name, d.bytes) for d in result.downloads] == [("orders.csv", len(EXPORT_CSV))]
    assert folder_facts(result.downloads[0].path)[0] == EXPORT_CSV
    assert not Path(elsewhere.downloads[0].path).parent.exists()
    assert events_of(site, EXPORT)


async def test_a_run_that_holds_a_secret_keeps_its_downloads_for_its_owner_only(
    browser: Browser, model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    async with model_server(export_script()) as server:
        config = config_for(server, None, "localizer", "json")
        config.secrets = {"TOKEN": SecretStr("not-on-this-page-4711")}
        async with Agent(config, browser=browser) as agent:
            result = await agent.run(EXPORT.url(site.url), EXPORT.goal, output_dir=tmp_path / "run")
    assert result.success, result.message
    assert folder_facts(result.downloads[0].path) == (EXPORT_CSV, 0o700, 0o600)


async def test_the_csv_export_through_webenv(
    browser: Browser, model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    async with model_server(export_script()) as server:
        config = config_for(server, None, "localizer", "json")
        async with Agent(config, browser=browser) as agent, WebEnv(agent=agent) as env:
            obs, _ = await env.reset({"url": EXPORT.url(site.url), "goal": EXPORT.goal}, output_dir=tmp_path / "run")
            click = {"action": "click_element", "element": "Export CSV button"}
            obs, reward, done, _, info = await env.step(click, point=obs.screenshot.frame.to_image(800, 145))
            seen = [e for e in obs.events if "in progress" not in e]
            for _ in range(5):  # announced after the page settled (a loaded machine): told at a later step
                if seen:
                    break
                obs, reward, done, _, info = await env.step({"action": "wait", "seconds": 1})
                seen = [e for e in obs.events if "in progress" not in e]
            assert seen == [TOLD] and not done
            [kept] = info["downloads"]
            assert kept.name == "orders.csv" and Path(kept.path) == tmp_path / "run" / "downloads" / "orders.csv"
            obs, reward, done, _, info = await env.step({"action": "answer", "content": EXPORT.answer})
            assert (reward, done) == (1.0, True) and info["result"].downloads == [kept]
            # Without an output folder: a temporary one, removed at the next reset.
            obs, _ = await env.reset({"url": EXPORT.url(site.url), "goal": EXPORT.goal})
            obs, *_, info = await env.step(click, point=obs.screenshot.frame.to_image(800, 145))
            for _ in range(5):
                if info["downloads"]:
                    break
                obs, *_, info = await env.step({"action": "wait", "seconds": 1})
            temporary = Path(info["downloads"][0].path)
            assert folder_facts(str(temporary)) == (EXPORT_CSV, 0o700, 0o600)
            await env.reset({"url": EXPORT.url(site.url), "goal": EXPORT.goal})
            assert not temporary.parent.exists()
    assert (tmp_path / "run" / "downloads" / "orders.csv").read_bytes() == EXPORT_CSV


def flood_script(goal: str, answer: str, waits: int = 0) -> dict[str, Any]:
    """Click the page's one link or button, wait ``waits`` steps (a second each), answer."""
    wait = [{"when": {"step": i}, "action": {"action": "wait", "seconds": 1}} for i in range(2, 2 + waits)]
    return {
        "elements": {"the download button": list(LINK)},
        "tasks": [
            {
                "id": "flood",
                "match": goal,
                "policy": [
                    {"when": {"step": 1}, "action": {"action": "click_element", "element": "the download button"}},
                    *wait,
                    {"action": {"action": "answer", "content": answer}},
                ],
                "validator": {"accept": [answer]},
            }
        ],
    }


async def test_a_flood_through_a_run_keeps_a_few_and_writes_nothing_else(
    browser: Browser, model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    goal = "Download every file of the flood page"
    async with model_server(flood_script(goal, "done", waits=2)) as server:
        config = config_for(server, None, "localizer", "json", max_steps=6)
        config.browser.max_downloads = 5
        async with Agent(config, browser=browser) as agent:
            stream = agent.stream(f"{site.url}/downloads/flood?n=1000", goal, output_dir=tmp_path / "run")
            steps = [step async for step in stream]
    result = stream.result
    assert result is not None and result.success and len(result.downloads) == 5
    told = [e for s in steps for e in s.events]
    over = [int(m) for e in told for m in re.findall(r"(\d+) more downloads? past the 5 a run keeps", e)]
    assert len(over) == len(set(s.index for s in steps if any("past the 5" in e for e in s.events)))  # one a step
    assert sum(1 for e in told if e.startswith("Downloaded: flood-")) == 5
    files = sorted(p.name for p in (tmp_path / "run" / "downloads").iterdir())
    assert files == sorted(d.name for d in result.downloads)
    assert {(tmp_path / "run" / "downloads" / n).read_bytes() for n in files} == {FILE_BYTE * FLOOD_BYTES}
    assert [p for p in listing(tmp_path) if not p.startswith("run")] == []


async def test_a_download_from_a_forbidden_host_is_refused_in_a_run(
    browser: Browser, model_server: ServerFactory, site: SiteServer, tmp_path: Path
) -> None:
    goal = "Download the file the page links to"
    forbidden = f"http://localhost:{site.port}/downloads/file?name=x.bin&bytes=100"
    page = f"{site.url}/downloads/link?href={forbidden.replace('?', '%3F').replace('&', '%26')}"
    site.download_hits.clear()
    async with model_server(flood_script(goal, "done")) as server:
        config = config_for(server, None, "localizer", "json", max_steps=3)
        config.browser.allowed_domains = [f"127.0.0.1:{site.port}"]
        async with Agent(config, browser=browser) as agent:
            stream = agent.stream(page, goal, output_dir=tmp_path / "run")
            steps = [step async for step in stream]
    assert stream.result is not None and stream.result.downloads == []
    assert steps[1].events == [  # the guard's refusal: in order with the click, always the next observation
        f"Blocked a navigation to {forbidden}: localhost is not in allowed_domains; the page stayed where it was."
    ]
    assert not (tmp_path / "run" / "downloads").exists()
    assert not [hit for hit in site.download_hits if hit[0].startswith("localhost")]
