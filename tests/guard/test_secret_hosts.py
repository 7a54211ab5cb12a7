"""Where each secret may be typed and sent, without a browser: the config's shapes and flags, the
refusals a write and a context's settings get, the default of a run by who chose its start, and a
suite variable's redaction."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from webagent.cli import build_parser, config_from_args
from webagent.config import AgentConfig, ContextSettings, load_config
from webagent.errors import ConfigError
from webagent.guard.secrets import Secrets
from webagent.runtime import Runtime, checked_sessions

VALUE = "s3cr3t-Pa55!#x"


def test_a_secret_table_gives_its_value_and_hosts(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(
        f'[secrets]\nPW = {{ value = "{VALUE}", hosts = ["app.example.com", "*.example.org", "127.0.0.1:8000"] }}\n'
        'PIN = "4711"\n'
    )
    config = load_config(toml, env={"WEBAGENT_SECRET_PW": VALUE + "e"})  # the value from the environment...
    assert config.secrets["PW"].get_secret_value() == VALUE + "e"  # ... the hosts still the file's
    assert config.secret_hosts == {"PW": ["app.example.com", "*.example.org", "127.0.0.1:8000"]}
    assert config.secret_set().hosts("PW") == ("app.example.com", "*.example.org", "127.0.0.1:8000")
    assert config.secret_set().hosts("PIN", ["a.test"]) == ("a.test",)  # none of its own: the run's
    assert VALUE not in repr(config) and VALUE not in config.model_dump_json()
    # The library takes the same shape.
    same = AgentConfig(secrets={"PW": {"value": VALUE, "hosts": ["app.example.com"]}})  # type: ignore[dict-item]
    assert same.secret_hosts == {"PW": ["app.example.com"]} and same.secrets["PW"].get_secret_value() == VALUE


def test_secret_host_flags_replace_the_files_hosts_of_that_secret(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(f'[secrets]\nPW = {{ value = "{VALUE}", hosts = ["old.example.com"] }}\nPIN = "4711"\n')
    argv = ["run", "--url", "x", "--goal", "g", "--config", str(toml), "--secret", "CODE=abc-123"]
    argv += ["--secret-host", "PW=a.example.com", "--secret-host", "PW=b.example.com:8443"]
    argv += ["--secret-host", "CODE=*.example.net"]
    config = config_from_args(build_parser().parse_args(argv))
    assert config.secret_hosts == {"PW": ["a.example.com", "b.example.com:8443"], "CODE": ["*.example.net"]}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--secret-host", "NOPE=a.example.com"], "hosts are given for NOPE, which is not a secret"),
        (["--secret-host", "PW=https://a.example.com/"], "secret PW: hosts: 'https://a.example.com/' is not a host"),
        (["--secret-host", "PW"], "--secret-host expects NAME=HOST"),
        (["--secret-host", "PW=*.*.example.com"], "a wildcard is only allowed as a leading"),
    ],
)
def test_bad_secret_hosts_are_one_line_errors_naming_the_flag(argv: list[str], message: str) -> None:
    args = build_parser().parse_args(["run", "--url", "x", "--goal", "g", "--secret", f"PW={VALUE}", *argv])
    with pytest.raises(ConfigError) as info:
        config_from_args(args)
    text = str(info.value)
    assert message in text and "\n" not in text and VALUE not in text


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (f'{{ value = "{VALUE}", hosts = [] }}', "hosts is empty"),
        (f'{{ value = "{VALUE}", host = ["a.test"] }}', "unknown key 'host'"),
        ('{ hosts = ["a.test"] }', "the table has no value"),
    ],
)
def test_a_bad_secret_table_is_a_config_error_never_quoting_the_value(tmp_path: Path, table: str, message: str) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(f"[secrets]\nPW = {table}\n")
    with pytest.raises(ConfigError) as info:
        load_config(toml, env={})
    assert message in str(info.value) and VALUE not in str(info.value)


def test_a_write_is_refused_on_a_host_not_allowed_for_its_secret() -> None:
    secrets = Secrets({"PW": VALUE, "PIN": "4711"}, hosts={"PW": ["*.example.com"]})
    assert secrets.typing_refusal("{{PW}}", ["https://app.example.com/login"]) is None
    assert secrets.typing_refusal("plain text", ["https://evil.test/"]) is None
    refusal = secrets.typing_refusal("user {{ PW }}", ["https://evil.test/x"])
    assert refusal is not None and refusal.startswith(
        "the secret PW was not typed: it may not be typed on evil.test:443"
    )
    assert "(allowed: *.example.com)" in refusal and "--secret-host PW=HOST" in refusal and VALUE not in refusal
    # Every document the keys would reach counts: a foreign frame inside an allowed page is refused.
    frame = ["https://evil.test/frame", "https://app.example.com/"]
    assert secrets.typing_refusal("{{PW}}", frame) is not None
    assert secrets.typing_refusal("{{PW}}", ["about:srcdoc", "https://app.example.com/"]) is None
    assert secrets.typing_refusal("{{PW}}", ["data:text/html,x", "https://app.example.com/"]) is not None
    # A secret without hosts takes the run's; with none, it is typed nowhere.
    assert secrets.typing_refusal("{{PIN}}", ["http://127.0.0.1:8000/"], ["127.0.0.1:8000"]) is None
    assert secrets.typing_refusal("{{PIN}}", ["http://127.0.0.1:8001/"], ["127.0.0.1:8000"]) is not None
    nowhere = secrets.typing_refusal("{{PIN}}", ["http://127.0.0.1:8000/"])
    assert nowhere is not None and "allowed: no host in this run" in nowhere and "allowed_domains" in nowhere


def test_a_header_or_password_with_a_restricted_secret_goes_only_within_its_hosts() -> None:
    secrets = Secrets({"TOKEN": VALUE}, hosts={"TOKEN": ["*.example.com"]})
    assert secrets.reach_refusal("Bearer {{TOKEN}}", None, "extra_http_headers X") is not None  # everywhere
    assert secrets.reach_refusal("Bearer {{TOKEN}}", ["api.example.com", "*.app.example.com"], "h") is None
    refusal = secrets.reach_refusal("Bearer {{TOKEN}}", ["api.example.com", "example.org"], "extra_http_headers X")
    assert (
        refusal == "extra_http_headers X sends the secret TOKEN to example.org, and TOKEN may go only to *.example.com"
    )
    assert Secrets({"TOKEN": VALUE}).reach_refusal("{{TOKEN}}", None, "h") is None  # no hosts: the operator's call


def _runtime(**config: object) -> Runtime:
    return Runtime(AgentConfig.model_validate(config), require=())


def test_a_context_setting_that_would_send_a_restricted_secret_everywhere_is_refused_up_front() -> None:
    secrets = {"TOKEN": {"value": VALUE, "hosts": ["api.example.com"]}}
    header = {"extra_http_headers": {"Authorization": "Bearer {{TOKEN}}"}}
    with pytest.raises(ConfigError, match="extra_http_headers Authorization sends the secret TOKEN to every host"):
        _runtime(secrets=secrets, browser=header)
    _runtime(secrets=secrets, browser={**header, "allowed_domains": ["api.example.com"]})  # kept within: fine
    with pytest.raises(ConfigError, match=r"http_credentials sends the secret TOKEN to other\.example\.com:443"):
        creds = {"username": "ada", "password": "{{TOKEN}}", "origin": "https://other.example.com"}
        _runtime(secrets=secrets, browser={"http_credentials": creds})
    creds = {"username": "ada", "password": "{{TOKEN}}", "origin": "https://api.example.com"}
    _runtime(secrets=secrets, browser={"http_credentials": creds})
    # A task's or check's own block is checked with the config's.
    config = AgentConfig.model_validate({"secrets": secrets})
    with pytest.raises(ConfigError, match="sends the secret TOKEN"):
        checked_sessions(config, [ContextSettings(extra_http_headers={"X": "{{TOKEN}}"})])


@pytest.mark.parametrize(
    ("allowed", "start", "hosts"),
    [
        ([], "https://app.example.com/login", ("app.example.com",)),
        ([], "http://127.0.0.1:8000/login", ("127.0.0.1:8000",)),  # a local start: that host:port only
        ([], "http://[::1]:8000/", ("[::1]:8000",)),
        ([], "file:///tmp/form.html", ()),
        ([], None, ()),  # a start someone else chose: nowhere
        (["*.example.com", "127.0.0.1"], "https://app.example.com/", ("*.example.com", "127.0.0.1")),
        (["*.example.com"], None, ("*.example.com",)),
    ],
)
def test_where_a_secret_without_hosts_may_be_typed_in_a_run(
    allowed: list[str], start: str | None, hosts: tuple[str, ...]
) -> None:
    assert _runtime(browser={"allowed_domains": allowed}).secret_hosts(start) == hosts


def test_a_suite_variable_is_redacted_as_itself() -> None:
    config = AgentConfig(variables={"SITE": SecretStr("http://127.0.0.1:8123")})
    secrets = config.secret_set()
    assert secrets.redact("open http://127.0.0.1:8123/login") == "open ${SITE}/login"
    assert secrets.names == [] and secrets.placeholders("{{SITE}}") == []  # never typed, never named
    assert secrets and not secrets.credentials  # a trace may still be kept (it is the pages' own record)
    assert Secrets({"PW": VALUE}).credentials and Secrets(hidden={"STATE": ["cookie-value-1"]}).credentials
