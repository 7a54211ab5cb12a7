"""The offline model server as every role's endpoint: configs and the bundled local tasks (for the
demo, the tests and the benchmarks)."""

from __future__ import annotations

import json
from typing import Any

from ..config import AgentConfig
from ..prompts import resource_dir

__all__ = ["PROFILE_MODELS", "load_local_tasks", "offline_config"]

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
