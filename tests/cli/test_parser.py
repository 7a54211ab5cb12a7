"""The CLI's options: the flag each config key is set by, as errors name it."""

from __future__ import annotations

import pytest

from webagent.cli.parser import _FLAGS, build_parser, cli_option, config_from_args
from webagent.config import ROLES, AgentConfig
from webagent.errors import ConfigError


def test_every_flag_named_for_a_config_key_is_a_flag_of_each_command() -> None:
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for command in ("run", "batch", "test", "mcp"):
        flags = {flag for action in commands[command]._actions for flag in action.option_strings}
        for key, flag in _FLAGS.items():
            assert flag in flags, (command, key, flag)
            section, _, field = key.partition(".")
            assert field in type(getattr(AgentConfig(), section)).model_fields, key


def test_a_missing_endpoint_names_the_cli_flag() -> None:
    with pytest.raises(ConfigError) as info:
        AgentConfig().require_endpoints(ROLES)
    assert info.value.worded(cli_option) == (
        "no base url configured for the policy model: set [policy] base_url in the config file, "
        "WEBAGENT_POLICY_BASE_URL, or --policy-base-url"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-steps", "0"], "invalid value for agent.max_steps (from --max-steps): "),
        (["--policy-base-url", "localhost:8000"], "invalid value for policy.base_url (from --policy-base-url): "),
        (["--viewport", "big"], "invalid value for browser.viewport (from --viewport): "),
    ],
)
def test_a_bad_flag_value_is_said_to_come_from_that_flag(flags: list[str], message: str) -> None:
    args = build_parser().parse_args(["run", "--url", "http://127.0.0.1:9/", "--goal", "x", *flags])
    with pytest.raises(ConfigError) as info:
        config_from_args(args)
    assert info.value.worded(cli_option).startswith(message), info.value
