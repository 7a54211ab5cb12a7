"""Configuration: defaults, TOML, environment, overrides, and errors that name what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webagent.config import AgentConfig, LocalizerConfig, RoleConfig, Viewport, load_config
from webagent.errors import ConfigError
from webagent.images import ResizeRule


def _toml(tmp_path: Path, text: str, name: str = "webagent.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(*args: Any, **kwargs: Any) -> str:
    kwargs.setdefault("env", {})
    with pytest.raises(ConfigError) as info:
        load_config(*args, **kwargs)
    return str(info.value)


# --------------------------------------------------------------------------- defaults


def test_defaults() -> None:
    config = load_config(env={})
    assert config == AgentConfig()
    assert config.policy.base_url is None and config.policy.model is None
    assert config.policy.max_tokens == 1024
    assert config.localizer.max_tokens == 128
    assert config.localizer.profile == "holo1.5"
    assert config.validator.max_tokens == 512
    assert config.agent.max_steps == 30
    assert config.agent.max_attempts == 3
    assert config.agent.screenshots_in_context == 3
    assert config.browser.headless is True
    assert config.browser.viewport == Viewport(width=1280, height=800)
    assert config.browser.screenshot_format == "jpeg"
    assert config.browser.args == []


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEBAGENT_POLICY_MODEL", "from-os-environ")
    assert load_config().policy.model == "from-os-environ"


def test_unrelated_webagent_env_vars_are_ignored() -> None:
    config = load_config(env={"WEBAGENT_LOG_LEVEL": "debug", "PATH": "/usr/bin", "OTHER_POLICY_MODEL": "x"})
    assert config == AgentConfig()


# --------------------------------------------------------------------------- TOML


def test_toml_loading(tmp_path: Path) -> None:
    path = _toml(
        tmp_path,
        """
[policy]
base_url = "http://policy:8000/v1/"
model = "qwen"
temperature = 0.3

[localizer]
base_url = "https://loc.example/v1"
model = "Hcompany/Holo2"
profile = "holo2"

[agent]
max_steps = 12

[browser]
headless = false
viewport = "1024x768"
args = ["--lang=en"]
""",
    )
    config = AgentConfig.load(path, env={})
    assert config.policy.base_url == "http://policy:8000/v1"  # trailing slash stripped
    assert config.policy.model == "qwen"
    assert config.policy.temperature == 0.3
    assert config.localizer.profile == "holo2"
    assert config.localizer.base_url == "https://loc.example/v1"
    assert config.agent.max_steps == 12
    assert config.agent.max_attempts == 3  # untouched default
    assert config.browser.headless is False
    assert config.browser.viewport == Viewport(width=1024, height=768)
    assert config.browser.args == ["--lang=en"]


def test_toml_viewport_table(tmp_path: Path) -> None:
    path = _toml(tmp_path, "[browser.viewport]\nwidth = 1000\nheight = 700\n")
    assert load_config(path, env={}).browser.viewport == Viewport(width=1000, height=700)


def test_precedence_defaults_toml_env_overrides(tmp_path: Path) -> None:
    path = _toml(
        tmp_path,
        """
[policy]
model = "toml-model"
base_url = "http://toml/v1"

[agent]
max_steps = 12
max_attempts = 5

[browser]
viewport = "800x600"
headless = true
""",
    )
    env = {
        "WEBAGENT_POLICY_MODEL": "env-model",
        "WEBAGENT_AGENT_MAX_STEPS": "20",
        "WEBAGENT_BROWSER_VIEWPORT": "1000x700",
        "WEBAGENT_BROWSER_HEADLESS": "false",
    }
    config = load_config(path, env=env)
    assert config.policy.model == "env-model"  # env beats TOML
    assert config.policy.base_url == "http://toml/v1"  # TOML beats defaults
    assert config.agent.max_steps == 20
    assert config.agent.max_attempts == 5
    assert config.agent.max_time_s == 600.0  # default
    assert config.browser.viewport == Viewport(width=1000, height=700)
    assert config.browser.headless is False

    config = load_config(
        path,
        env=env,
        overrides={"policy.model": "flag-model", "agent.max_steps": 7, "browser.viewport": "640x480"},
    )
    assert config.policy.model == "flag-model"  # overrides beat env
    assert config.agent.max_steps == 7
    assert config.browser.viewport == Viewport(width=640, height=480)
    assert config.browser.headless is False  # still from env


def test_none_overrides_are_ignored() -> None:
    config = load_config(env={"WEBAGENT_POLICY_MODEL": "env-model"}, overrides={"policy.model": None})
    assert config.policy.model == "env-model"


def test_env_list_values_split_on_whitespace() -> None:
    config = load_config(env={"WEBAGENT_BROWSER_ARGS": "--lang=en  --mute-audio"})
    assert config.browser.args == ["--lang=en", "--mute-audio"]


# --------------------------------------------------------------------------- errors


def test_unknown_section(tmp_path: Path) -> None:
    path = _toml(tmp_path, "[polcy]\nmodel = 'x'\n")
    message = _error(path)
    assert "polcy" in message and str(path) in message


def test_section_must_be_a_table(tmp_path: Path) -> None:
    message = _error(_toml(tmp_path, "policy = 3\n"))
    assert "[policy]" in message and "table" in message


def test_unknown_key(tmp_path: Path) -> None:
    path = _toml(tmp_path, "[policy]\nmodle = 'x'\n")
    message = _error(path)
    assert "policy.modle" in message and str(path) in message


def test_unknown_env_var() -> None:
    message = _error(env={"WEBAGENT_POLICY_MODLE": "x"})
    assert "WEBAGENT_POLICY_MODLE" in message and "modle" in message
    assert "model" in message  # lists the known keys


def test_unknown_override_key() -> None:
    assert "policy.modle" in _error(overrides={"policy.modle": "x"})
    assert "bogus.x" in _error(overrides={"bogus.x": "x"})


@pytest.mark.parametrize(
    ("toml", "key", "value"),
    [
        ("[agent]\nmax_steps = 0\n", "agent.max_steps", "0"),
        ("[localizer]\nprofile = 'holotron'\n", "localizer.profile", "holotron"),
        ("[policy]\nbase_url = 'ftp://x'\n", "policy.base_url", "ftp://x"),
        ("[browser]\nviewport = 'big'\n", "browser.viewport", "big"),
        ("[browser]\nviewport = {width = 100, height = 700}\n", "browser.viewport.width", "100"),
        ("[policy]\ntemperature = 3.0\n", "policy.temperature", "3.0"),
    ],
)
def test_invalid_values_name_the_key(tmp_path: Path, toml: str, key: str, value: str) -> None:
    message = _error(_toml(tmp_path, toml))
    assert key in message
    assert value in message


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"WEBAGENT_AGENT_MAX_STEPS": "0"}, "agent.max_steps"),
        ({"WEBAGENT_AGENT_MAX_STEPS": "many"}, "agent.max_steps"),
        ({"WEBAGENT_BROWSER_VIEWPORT": "big"}, "browser.viewport"),
        ({"WEBAGENT_BROWSER_HEADLESS": "maybe"}, "browser.headless"),
        ({"WEBAGENT_LOCALIZER_PROFILE": "holotron"}, "localizer.profile"),
    ],
)
def test_invalid_env_values_name_the_key(env: dict[str, str], key: str) -> None:
    assert key in _error(env=env)


def test_invalid_env_value_is_not_blamed_on_the_config_file(tmp_path: Path) -> None:
    # The file is fine; the bad value comes from the environment. The message must not send the
    # user to look for it in the file.
    path = _toml(tmp_path, "[policy]\nmodel = 'm'\n")
    message = _error(path, env={"WEBAGENT_AGENT_MAX_STEPS": "0"})
    assert "agent.max_steps" in message
    assert str(path) not in message


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    path = _toml(tmp_path, "[policy\nmodel = 'x'\n", name="broken.toml")
    message = _error(path)
    assert str(path) in message and "TOML" in message


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "missing.toml"
    message = _error(path)
    assert str(path) in message and "does not exist" in message


def test_unreadable_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\xff\xfe\x00bad")
    assert str(path) in _error(path)


# --------------------------------------------------------------------------- endpoints


def _endpoints(**skip: bool) -> dict[str, str]:
    out = {}
    for role in ("policy", "localizer", "validator"):
        for field in ("base_url", "model"):
            if not skip.get(f"{role}_{field}"):
                out[f"{role}.{field}"] = f"http://{role}/v1" if field == "base_url" else f"{role}-model"
    return out


def test_require_endpoints_passes_when_complete() -> None:
    load_config(env={}, overrides=_endpoints()).require_endpoints()


@pytest.mark.parametrize(
    ("skip", "role", "field", "env", "flag"),
    [
        ({"policy_base_url": True}, "policy", "base url", "WEBAGENT_POLICY_BASE_URL", "--policy-base-url"),
        ({"localizer_model": True}, "localizer", "model", "WEBAGENT_LOCALIZER_MODEL", "--localizer-model"),
        ({"validator_base_url": True}, "validator", "base url", "WEBAGENT_VALIDATOR_BASE_URL", "--validator-base-url"),
        (
            {"localizer_model": True, "validator_model": True},
            "localizer",
            "model",
            "WEBAGENT_LOCALIZER_MODEL",
            "--localizer-model",
        ),
    ],
)
def test_require_endpoints_names_first_missing(
    skip: dict[str, bool], role: str, field: str, env: str, flag: str
) -> None:
    config = load_config(env={}, overrides=_endpoints(**skip))
    with pytest.raises(ConfigError) as info:
        config.require_endpoints()
    message = str(info.value)  # the library's wording: the AgentConfig field, not a CLI flag
    assert f"no {field} configured for the {role} model" in message
    assert env in message and f"AgentConfig.{role}.{field.replace(' ', '_')}" in message
    assert flag not in message
    assert info.value.key == f"{role}.{field.replace(' ', '_')}"
    # Each interface words it with its own option for that key.
    assert info.value.worded(lambda key: f"<{key}>").endswith(f", or <{info.value.key}>")
    assert info.value.worded(lambda key: None) == (
        f"no {field} configured for the {role} model: set [{role}] {field.replace(' ', '_')} in the config file "
        f"or {env}"
    )


def test_a_bad_override_names_the_option_it_came_from() -> None:
    options = {"agent.max_steps": "--max-steps"}
    assert "invalid value for agent.max_steps (from --max-steps)" in _error(
        overrides={"agent.max_steps": 0}, option=options.get
    )
    assert "invalid value for agent.max_steps (from overrides)" in _error(overrides={"agent.max_steps": 0})


def test_require_endpoints_on_defaults_names_policy() -> None:
    with pytest.raises(ConfigError, match="policy"):
        AgentConfig().require_endpoints()


def test_role_accessor() -> None:
    config = AgentConfig()
    assert config.role("localizer") is config.localizer
    with pytest.raises(KeyError):
        config.role("browser")


# --------------------------------------------------------------------------- localizer rule


def test_resize_rule_of_profiles() -> None:
    assert LocalizerConfig().resize_rule() == ResizeRule(28, 3136, 12_845_056)
    assert LocalizerConfig(profile="holo1").resize_rule() == ResizeRule(28, 3136, 1_003_520)
    assert LocalizerConfig(profile="holo2").resize_rule() == ResizeRule(32, 65_536, 16_777_216)


def test_resize_rule_overrides() -> None:
    config = LocalizerConfig(profile="holo2", min_pixels=1000, max_pixels=2_000_000)
    assert config.resize_rule() == ResizeRule(32, 1000, 2_000_000)
    assert LocalizerConfig(profile="holo1", max_pixels=500_000).resize_rule() == ResizeRule(28, 3136, 500_000)
    loaded = load_config(env={"WEBAGENT_LOCALIZER_MAX_PIXELS": "123456"}, overrides={"localizer.profile": "holo1"})
    assert loaded.localizer.resize_rule() == ResizeRule(28, 3136, 123_456)


def test_role_config_base_url_validation() -> None:
    assert RoleConfig(base_url="  https://x/v1/ ").base_url == "https://x/v1"
    with pytest.raises(ValueError, match="http"):
        RoleConfig(base_url="x/v1")


def test_policy_context_settings_from_the_environment() -> None:
    config = load_config(None, env={})
    assert config.agent.context is None and config.agent.epoch_steps == 6  # unset: the policy contract's
    assert config.policy.contract().context == "append"
    env = {"WEBAGENT_AGENT_CONTEXT": "history", "WEBAGENT_AGENT_HISTORY_PRUNING": "step"}
    assert (load_config(None, env=env).agent.context, load_config(None, env=env).agent.history_pruning) == (
        "history",
        "step",
    )
    env = {"WEBAGENT_AGENT_CONTEXT": "window", "WEBAGENT_AGENT_EPOCH_STEPS": "4", "WEBAGENT_AGENT_EPOCH_MAX_CHARS": "0"}
    config = load_config(None, env=env)
    assert (config.agent.context, config.agent.epoch_steps, config.agent.epoch_max_chars) == ("window", 4, 0)
    with pytest.raises(ConfigError, match=r"agent\.context"):
        load_config(None, env={"WEBAGENT_AGENT_CONTEXT": "sliding"})
