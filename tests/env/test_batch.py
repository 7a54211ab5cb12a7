"""MiniWoB++ in ``webagent batch``: task lines naming a benchmark task and its seed, the page's verdict as
each task's success, and success per benchmark task in the summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser

from webagent import InputError
from webagent.batch import BatchRunner, read_results
from webagent.batch.summary import summarize
from webagent.tasks import load_tasks
from webagent.testing.server import FakeModelServer

from ..conftest import make_config
from .helpers import plan_for
from .test_vf import BUTTON, VIEWPORT, script

pytestmark = pytest.mark.browser


def test_the_task_file_form_and_its_errors(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        '{"id": "a", "task": "miniwob/click-test", "seed": 3}\n{"task": "miniwob/enter-text", "seed": 4}\n'
        '{"task": "miniwob/click-button"}\n'
    )
    a, b, c = load_tasks(path)
    assert (a.id, a.benchmark, a.seed) == ("a", "miniwob/click-test", 3)
    assert (b.id, c.id, c.seed) == ("miniwob/enter-text@4", "miniwob/click-button", None)
    for line, error in (
        ('{"task": "miniwob/nope", "seed": 1}', "tasks.jsonl:1: no MiniWoB"),
        ('{"task": "miniwob/click-test", "seed": "x"}', "tasks.jsonl:1: 'seed' must be an integer"),
        ('{"task": "webarena/3"}', "tasks.jsonl:1: no task set named 'webarena'"),
    ):
        path.write_text(line + "\n")
        with pytest.raises(InputError, match=error):
            load_tasks(path)


async def test_a_batch_of_miniwob_tasks_is_judged_by_their_pages(browser: Browser, tmp_path: Path) -> None:
    (center,) = await plan_for(browser, "miniwob/click-test", 7, VIEWPORT, BUTTON)
    path = tmp_path / "tasks.jsonl"
    lines: list[dict[str, Any]] = [
        {"id": "hit", "task": "miniwob/click-test", "seed": 7},
        {"id": "miss", "task": "miniwob/click-test", "seed": 8},  # another layout: the scripted point misses
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    async with FakeModelServer(script((center["x"], center["y"]))) as server:
        config = make_config(server, max_steps=2)
        config.browser.viewport.width, config.browser.viewport.height = VIEWPORT
        runner = BatchRunner(config, load_tasks(path), tmp_path / "out", concurrency=2)
        stats = await runner.run()
    results = {r["id"]: r for r in map(json.loads, (tmp_path / "out" / "results.jsonl").read_text().splitlines())}
    assert results["hit"]["success"] and results["hit"]["stop_reason"] == "answered"
    assert not results["miss"]["success"] and results["miss"]["benchmark"] == "miniwob/click-test"
    summary = summarize(read_results(tmp_path / "out"), stats, config, attempts=1)
    assert summary.as_json()["benchmarks"] == {
        "miniwob/click-test": {"tasks": 2, "succeeded": 1, "errors": 0, "success_rate": 0.5}
    }
