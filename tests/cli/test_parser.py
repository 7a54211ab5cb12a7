"""The CLI's options: the flag each config key is set by, as errors name it."""

from __future__ import annotations

import pytest

from webagent.cli.main import main
from webagent.cli.parser import _FLAGS, build_parser, cli_option
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


def test_a_bad_flag_value_is_said_to_come_from_that_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--url", "http://127.0.0.1:9/", "--goal", "x", "--max-steps", "0", "--base-url", "x"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("webagent: error: invalid value for ") and "(from --" in err, err
    assert err.count("\n") == 1
