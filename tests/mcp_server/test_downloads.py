"""The MCP tools list the files a run's pages downloaded: run_task's and act's results, through the
SDK's client (the CSV export of ``/hands/export.html``, the offline model server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webagent.testing.hands import EXPORT, EXPORT_CSV, export_script
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory
from .conftest import Connect, local_config

pytestmark = pytest.mark.e2e


def kept_bytes(path: str) -> bytes:
    return Path(path).read_bytes()


async def test_run_task_and_act_return_the_downloads(
    model_server: ServerFactory, connect: Connect, site: SiteServer, tmp_path: Path
) -> None:
    async with model_server(export_script()) as server, connect(local_config(server)) as client:
        ran = await client.call_tool("run_task", {"url": EXPORT.url(site.url), "goal": EXPORT.goal})
        opened = await client.call_tool("open_session", {"url": EXPORT.url(site.url)})
        assert opened.structured_content is not None
        sid = opened.structured_content["session_id"]
        acted = await client.call_tool("act", {"session_id": sid, "goal": EXPORT.goal})
        assert acted.structured_content is not None and ran.structured_content is not None
        for data in (ran.structured_content, acted.structured_content):
            assert data["success"], data
            [kept] = data["downloads"]
            assert (kept["name"], kept["bytes"]) == ("orders.csv", len(EXPORT_CSV)) and kept["url"].startswith("blob:")
            assert Path(kept["path"]) == Path(data["run_dir"]) / "downloads" / "orders.csv"
            assert kept_bytes(kept["path"]) == EXPORT_CSV
        # act's run on the session's page took the download, not the session's own handler.
        assert Path(acted.structured_content["run_dir"]) == tmp_path / "runs" / f"session-{sid}" / "act-1"
