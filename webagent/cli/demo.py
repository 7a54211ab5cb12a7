"""``webagent demo``: a real task on a bundled local site, with the offline model server as the VLM."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..errors import InputError
from ..records import RunResult

__all__ = ["run_demo"]


def run_demo(*, task_id: str, profile: str, output: str | None, quiet: bool) -> RunResult:
    from ..testing.offline import load_local_tasks, offline_config
    from ..testing.server import FakeModelServer
    from ..testing.sites import SiteServer, data_dir
    from .run import run_task

    script = data_dir() / "scripts" / f"{task_id}.json"
    with SiteServer() as site:
        tasks = load_local_tasks(site.url)
        if task_id not in tasks or not script.exists():
            raise InputError(f"unknown demo task {task_id!r}; bundled tasks: {', '.join(sorted(tasks))}")
        task = tasks[task_id]
        server = FakeModelServer(script)
        server.start_in_thread()
        try:
            config = offline_config(server.url, profile, max_steps=12)
            out = Path(output) if output else Path("runs") / f"demo-{task_id}"
            return asyncio.run(run_task(config, task["url"], task["goal"], out, quiet, None))
        finally:
            server.stop_thread()
