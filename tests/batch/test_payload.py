"""What crosses to a worker process or a Ray actor: the config and each task as they are here, with
which fields were set (what was decided stays decided, a default stays a default) and every value
(secrets and passwords included)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from webagent.batch.worker import config_payload, payload
from webagent.config import AgentConfig, ContextSettings, load_config
from webagent.runtime import checked_sessions
from webagent.tasks import TaskOptions, TaskSpec

PROXY_PASSWORD = "proxy-pass-9931"


def set_leaves(model: BaseModel, prefix: str = "") -> set[str]:
    """The dotted names of every field set, at every level (a section only through what is set in it)."""
    found: set[str] = set()
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            found |= set_leaves(value, f"{prefix}{name}.")
            if name in model.model_fields_set and not set_leaves(value):
                found.add(prefix + name)
        elif name in model.model_fields_set:
            found.add(prefix + name)
    return found


def across(model: BaseModel) -> Any:
    """What the other process rebuilds: the payload through JSON, as the pipe or Ray carries it."""
    return type(model).model_validate(json.loads(json.dumps(payload(model))))


def test_a_config_crosses_with_its_values_and_what_it_set(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(
        '[secrets]\nPASSWORD = { value = "pw-value-123", hosts = ["app.example.com"] }\nPIN = "4711"\n'
        f'[browser]\nuser_agent = "UA-operator"\nproxy = {{ server = "http://127.0.0.1:3128", password = "{PROXY_PASSWORD}" }}\n'
        'http_credentials = "ada:{{PIN}}"\n[policy]\napi_key = "sk-operator"\n'
    )
    config = load_config(toml, env={}, overrides={"agent.max_steps": 7})
    config.localizer.timeout_s = 3.0  # a section never set, changed since: goes with the change
    config = config.model_copy(update={"variables": {"SITE": SecretStr("http://127.0.0.1:8000")}})
    config = checked_sessions(config, [ContextSettings(storage_state=None)])  # decides direct_cdp: off
    assert config.browser.direct_cdp is False

    rebuilt = across(config)
    assert rebuilt.model_dump() == config.model_dump()  # SecretStr compares by value
    assert set_leaves(rebuilt) == set_leaves(config)
    assert "browser.direct_cdp" in set_leaves(rebuilt)  # decided in the parent, so it holds there
    assert "browser.headless" not in set_leaves(rebuilt)  # a default stays a default
    assert rebuilt.browser.proxy.password.get_secret_value() == PROXY_PASSWORD  # not ******
    assert rebuilt.secret_hosts == {"PASSWORD": ["app.example.com"]}
    assert config_payload(config) == payload(config)


def test_a_config_that_set_nothing_crosses_as_defaults() -> None:
    config = AgentConfig()
    rebuilt = across(config)
    assert payload(config) == {} and rebuilt == config and set_leaves(rebuilt) == set()
    assert "direct_cdp" not in rebuilt.browser.model_fields_set  # the worker decides as the parent would


def test_a_task_crosses_with_its_browser_block_naming_only_what_it_set(tmp_path: Path) -> None:
    task = TaskSpec(
        id="t",
        url="https://example.com/",
        goal="g",
        options=TaskOptions(max_steps=3, expect="done"),
        browser=ContextSettings(locale="fr-FR", proxy={"server": "http://127.0.0.1:3128", "password": PROXY_PASSWORD}),
    )
    data = TaskSpec(
        id="d", url="https://example.com/", goal="g", browser=ContextSettings(locale="de-DE"), trusted=False
    )
    for original in (task, data):
        rebuilt = across(original)
        assert rebuilt == original and set_leaves(rebuilt) == set_leaves(original)
    assert across(task).browser.proxy.password.get_secret_value() == PROXY_PASSWORD
    assert across(data).trusted is False

    # The task's block over the config's session settings replaces what the task set, nothing more:
    # a dump with every field written out replaced the config's user agent with the default (None).
    base = AgentConfig.model_validate({"browser": {"user_agent": "UA-operator", "timezone_id": "Europe/Paris"}})
    effective = base.browser.over(across(data).browser)
    assert effective.locale == "de-DE" and effective.user_agent == "UA-operator"
    assert effective.timezone_id == "Europe/Paris"
