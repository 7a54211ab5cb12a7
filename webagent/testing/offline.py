"""The offline model server as every role's endpoint: configs and the bundled local tasks (for the
demo, the tests and the benchmarks)."""

from __future__ import annotations

import json
from typing import Any

from ..config import AgentConfig
from ..families import FAMILIES, PROFILES
from ..records import ROLES
from .sites import data_dir

__all__ = ["FAMILY_MODELS", "PROFILE_MODELS", "load_local_tasks", "offline_config"]

#: Model names the offline server answers as, per family (it picks the reply format from them).
FAMILY_MODELS = {name: family.models[0] for name, family in FAMILIES.items()}
#: The same, for the localizer profiles.
PROFILE_MODELS = {name: FAMILY_MODELS[name] for name in PROFILES}


def load_local_tasks(base_url: str) -> dict[str, dict[str, Any]]:
    """The bundled tasks (webagent/testing/data/local.jsonl) with ``{base}`` replaced by the site server's URL."""
    tasks: dict[str, dict[str, Any]] = {}
    for line in (data_dir() / "local.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            task = json.loads(line)
            task["url"] = task["url"].replace("{base}", base_url)
            tasks[task["id"]] = task
    return tasks


def offline_config(server_url: str, profile: str, *, family: str | None = None, **agent: Any) -> AgentConfig:
    """A config pointing all three roles at the offline server: the localizer answering as a model
    of ``profile``, the policy and the validator as one of ``family`` (set as ``[policy] family``;
    None: the profile's, unset)."""
    model = PROFILE_MODELS[profile]
    roles = {
        role: {"base_url": f"{server_url}/{role}/v1", "model": model, "api_key": "offline", "timeout_s": 20.0}
        for role in ROLES
    }
    roles["localizer"]["profile"] = profile
    if family is not None:
        roles["policy"].update(model=FAMILY_MODELS[family], family=family)
        roles["validator"]["model"] = FAMILY_MODELS[family]
    return AgentConfig.model_validate({**roles, "agent": agent})
