"""Issue 43 in a real batch: a renderer that dies while a session is set up (real Chromium, CDP
``Page.crash`` as the navigation guard is installed: ``Page.enable: Target crashed``) is the
infrastructure's. The task is re-run on a fresh session within its attempt and passes; the re-run
is counted apart in summary.json (``setup_crash``), the attempt number kept, and the re-run has its
own steps (none spent by the set-up that failed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webagent.batch import BatchRunner, read_results
from webagent.batch.summary import summarize
from webagent.tasks import TaskSpec
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer

from ..browser.crashing import crash_at_set_up
from ..conftest import load_task_script, make_config
from .test_runner import LOCAL_ANSWERS, LOCAL_STEPS, local_lines, real_browser


@real_browser
async def test_a_renderer_crash_in_set_up_is_rerun_in_its_attempt_and_passes(
    site: SiteServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = local_lines(site)["catalog-price"]
    tasks = [TaskSpec(id=f"price-{k}", url=line["url"], goal=line["goal"]) for k in range(2)]
    crashed = crash_at_set_up(monkeypatch)  # the first session to set up: its renderer dies
    out = tmp_path / "b"
    async with FakeModelServer(load_task_script("local")) as server:
        config = make_config(server)
        config.browser.allowed_domains = ["127.0.0.1"]  # the guard is installed: every request judged
        runner = BatchRunner(config, tasks, out, concurrency=2, attempts=2)
        stats = await runner.run()
    assert crashed == ["about:blank"]
    results = {r.id: r for r in read_results(out)}
    assert sorted(results) == ["price-0", "price-1"]
    for r in results.values():
        assert r.success and r.answer == LOCAL_ANSWERS["catalog-price"] and not r.infrastructure, r.message
        assert r.attempts == 1  # pass@2: the set-up crash spent no attempt
    rerun = [r for r in results.values() if r.retried]
    assert len(rerun) == 1, results
    (record,) = rerun[0].attempt_records
    assert record.attempt == 1 and record.output_dir == f"runs/{rerun[0].id}/attempt-1"
    ((reason, message, steps),) = [(x.reason, x.message, x.steps) for x in record.reruns]
    assert reason == "setup_crash" and steps == 0
    assert "cannot set up the navigation policy" in message and "Target crashed" in message, message
    assert record.steps == LOCAL_STEPS["catalog-price"]  # the re-run's own steps, all of them
    assert rerun[0].infra_reruns == 0
    summary = summarize(list(results.values()), stats, config, attempts=2)
    assert summary.setup_crash_reruns == 1 and summary.errors == 0 and summary.success_rate == 1.0
    assert summary.retried_after_crash == 0 and summary.infra_reruns == 0
    ((cause, n),) = summary.run.setup_crash_causes.items()
    assert n == 1 and cause.startswith("cannot set up the navigation policy"), cause
