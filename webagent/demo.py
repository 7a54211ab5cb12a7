"""``webagent demo``: a real task on a bundled local site, with the offline model server as the VLM."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from .config import AgentConfig
from .errors import InputError
from .prompts import resource_dir
from .records import RunResult

__all__ = ["PROFILE_MODELS", "load_local_tasks", "run_demo"]

#: Model names the offline server answers as, per localizer profile (it picks the reply format from them).
PROFILE_MODELS = {
    "holo1": "Hcompany/Holo1-7B",
    "holo1.5": "Hcompany/Holo1.5-7B",
    "holo2": "Hcompany/Holo2-8B",
}


def load_local_tasks(base_url: str) -> dict[str, dict[str, Any]]:
    """The bundled tasks (tasks/local.jsonl) with ``{base}`` replaced by the site server's URL."""
    tasks: dict[str, dict[str, Any]] = {}
    for line in (resource_dir("tasks") / "local.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            task = json.loads(line)
            task["url"] = task["url"].replace("{base}", base_url)
            tasks[task["id"]] = task
    return tasks


def offline_config(server_url: str, profile: str, **agent: Any) -> AgentConfig:
    """A config pointing all three roles at the offline server."""
    model = PROFILE_MODELS[profile]
    roles = {
        role: {"base_url": f"{server_url}/{role}/v1", "model": model, "api_key": "offline", "timeout_s": 20.0}
        for role in ("policy", "localizer", "validator")
    }
    roles["localizer"]["profile"] = profile
    return AgentConfig.model_validate({**roles, "agent": agent})


def run_demo(*, task_id: str, profile: str, output: str | None, quiet: bool) -> RunResult:
    from .cli import _run
    from .testing.server import FakeModelServer
    from .testing.sites import SiteServer

    script = resource_dir("tasks") / "scripts" / f"{task_id}.json"
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
            return asyncio.run(_run(config, task["url"], task["goal"], out, quiet, None))
        finally:
            server.stop_thread()
