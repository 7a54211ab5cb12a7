"""``webagent export`` on a batch directory; bad input is a one-line error with exit code 2."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from webagent.batch import BatchRunner
from webagent.cli import main
from webagent.tasks import TaskSpec

from ..conftest import ServerFactory, load_task_script, make_config

pytestmark = pytest.mark.browser


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """``main`` configures structlog and logging for the process: undo it for the tests after these."""
    saved, handlers = structlog.get_config(), list(logging.getLogger().handlers)
    yield
    structlog.configure(**saved)
    logging.getLogger().handlers[:] = handlers


async def test_export_of_a_batch_directory(
    model_server: ServerFactory, local_tasks: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = ["catalog-price", "catalog-feedback"]
    tasks = [TaskSpec(id=i, url=local_tasks[i]["url"], goal=local_tasks[i]["goal"], reference=["$"]) for i in ids]
    async with model_server(load_task_script("local")) as server:
        runner = BatchRunner(make_config(server), tasks, tmp_path / "batch", concurrency=2, attempts=2, sample_all=True)
        await runner.run()
    out = tmp_path / "export"
    code = main(["export", str(tmp_path / "batch"), "--output", str(out), "--task", "catalog-price", "--json"])
    assert code == 0
    stats = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    records = [json.loads(line) for line in (out / "data.jsonl").read_text().splitlines()]
    # Two attempts of the same deterministic task: the second attempt's records are all duplicates.
    assert stats["runs"] == 2 and stats["duplicates"] == stats["records"] == len(records) == 6
    meta = records[0]["metadata"]
    assert meta["task_id"] == "catalog-price" and meta["attempt"] == 1 and meta["reference_match"] is True
    assert meta["run"].endswith("runs/catalog-price/attempt-1")


def test_bad_input_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path / "missing"), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    (tmp_path / "results.jsonl").write_text("not json\n")
    assert main(["export", str(tmp_path), "--output", str(tmp_path / "out")]) == 2
    assert "results" in capsys.readouterr().err
