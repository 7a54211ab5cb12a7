"""Secrets without a browser: configuration, substitution, redaction of text, records and requests."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
from pydantic import SecretStr

from webagent.actions import Answer, WriteElement, describe_action
from webagent.cli import build_parser, config_from_args
from webagent.config import load_config
from webagent.errors import ActionError, ConfigError
from webagent.guard.secrets import Secrets, redact_log_event, shorten, well_formed
from webagent.model.replies import short
from webagent.records import RunResult, Step

VALUE = "s3cr3t-Pa55!#x"


def test_config_sources_and_no_leak_in_repr_or_dump(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(f'[secrets]\nFILE_PW = "{VALUE}"\n')
    config = load_config(toml, env={"WEBAGENT_SECRET_ENV_PW": VALUE + "e"}, overrides={"secrets.CLI_PW": VALUE + "c"})
    assert sorted(config.secrets) == ["CLI_PW", "ENV_PW", "FILE_PW"]
    assert config.secrets["ENV_PW"].get_secret_value() == VALUE + "e"
    for text in (repr(config), str(config), config.model_dump_json(), json.dumps(config.model_dump(mode="json"))):
        assert VALUE not in text


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"WEBAGENT_SECRET_9X": VALUE}, "secret name '9X' is invalid"),
        ({"WEBAGENT_SECRET_PIN": "12"}, "secret PIN is shorter than 3 characters"),
        ({"WEBAGENT_SECRET_PW": "a\nb c"}, "secret PW contains a line break"),
    ],
)
def test_bad_secrets_are_config_errors_that_never_quote_the_value(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env=env)
    text = str(info.value)
    assert message in text and "\n" not in text
    for value in env.values():
        assert value not in text


def test_cli_secret_flag() -> None:
    parser = build_parser()
    args = parser.parse_args(["run", "--url", "x", "--goal", "g", "--secret", f"PW={VALUE}", "--secret", "U=a=b=c"])
    config = config_from_args(args)
    assert config.secrets["PW"].get_secret_value() == VALUE and config.secrets["U"].get_secret_value() == "a=b=c"
    bad = parser.parse_args(["batch", "t.jsonl", "--output", "o", "--secret", VALUE])
    with pytest.raises(ConfigError) as info:
        config_from_args(bad)
    assert "NAME=VALUE" in str(info.value) and VALUE not in str(info.value)


def test_substitute() -> None:
    secrets = Secrets({"PW": SecretStr(VALUE), "USER": "ada_l"})
    assert secrets.names == ["PW", "USER"]
    assert secrets.substitute("{{USER}} / {{ PW }}") == (f"ada_l / {VALUE}", True)
    assert secrets.substitute("plain {text}") == ("plain {text}", False)
    with pytest.raises(ActionError) as info:
        secrets.substitute("{{TOKEN}}")
    assert "no secret named TOKEN" in str(info.value) and "PW, USER" in str(info.value)
    assert VALUE not in str(info.value)
    assert not Secrets() and Secrets().redact(VALUE) == VALUE
    assert VALUE not in repr(secrets)


@pytest.mark.parametrize(
    "form",
    [
        VALUE,
        "s3cr3t-Pa55%21%23x",  # quote(safe="")
        "s3cr3t-Pa55!%23x",  # quote()
        "s3cr3t-Pa55%21%23x".lower().replace("s3cr3t-pa55", "s3cr3t-Pa55"),  # lower-case hex
        "%73%33cr3t-Pa55!#%78",  # encoded to any degree
    ],
)
def test_redact_forms(form: str) -> None:
    secrets = Secrets({"PW": VALUE})
    text = f"https://site.test/login?user=ada&code={form}&next=1"
    assert secrets.redact(text) == "https://site.test/login?user=ada&code={{PW}}&next=1"


def test_redact_html_json_and_overlaps() -> None:
    tricky = 'a<b"c d\\e'
    secrets = Secrets({"T": tricky, "SHORT": "abc", "LONG": "abcdef"})
    assert secrets.redact("x a&lt;b&quot;c d\\e y") == "x {{T}} y"
    assert secrets.redact(json.dumps({"k": tricky})) == '{"k": "{{T}}"}'
    assert secrets.redact("a+b: 'a%3Cb%22c+d%5Ce'") == "a+b: '{{T}}'"
    assert secrets.redact("abcdef abc") == "{{LONG}} {{SHORT}}"  # the longest value wins


def test_redact_model_keeps_the_screenshot_and_returns_clean_records_as_is() -> None:
    secrets = Secrets({"PW": VALUE})
    step = Step(index=1, url=f"https://a.test/?p={VALUE}", title=f"Hi {VALUE}", events=[f"alert {VALUE}"])
    step.action = WriteElement(element="password", content="{{PW}}")
    step.image = object()  # type: ignore[assignment]
    clean = secrets.redact_model(step)
    assert VALUE not in clean.model_dump_json() and clean.image is step.image
    assert clean.url == "https://a.test/?p={{PW}}" and clean.events == ["alert {{PW}}"]
    assert isinstance(clean.action, WriteElement) and clean.action.content == "{{PW}}"
    result = RunResult(success=True, stop_reason="answered", url="https://a.test/", goal="g", answer="nothing secret")
    assert secrets.redact_model(result) is result


def test_redact_messages_text_only() -> None:
    secrets = Secrets({"PW": VALUE})
    image = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}
    messages = [
        {"role": "system", "content": f"sys {VALUE}"},
        {"role": "user", "content": [{"type": "text", "text": f"url ?p={VALUE}"}, image]},
        {"role": "assistant", "content": None},
    ]
    out = secrets.redact_messages(messages)
    assert VALUE not in json.dumps(out)
    assert out[1]["content"][1] is image and out[2] == messages[2]
    assert VALUE in json.dumps(messages)  # the input is left alone


def test_log_events_are_redacted_while_the_secrets_live() -> None:
    secrets = Secrets({"PW": "hunter22"})
    event = redact_log_event(None, "warning", {"event": "page_crashed", "url": "http://a.test/?pw=hunter22", "n": 3})
    assert event == {"event": "page_crashed", "url": "http://a.test/?pw={{PW}}", "n": 3}
    del secrets
    gc.collect()
    assert redact_log_event(None, "info", {"url": "hunter22"}) == {"url": "hunter22"}  # none live: untouched


@pytest.mark.parametrize(
    "form",
    [
        "&#115;&#51;&#99;&#114;&#51;&#116;&#45;&#80;&#97;&#53;&#53;&#33;&#35;&#120;",  # decimal references
        "&#x73;&#X33;cr3t-Pa55&#x21;&#x23;x",  # hex, either case, mixed with plain characters
        "s3cr3t-Pa55&excl;&num;x",  # named
        "s3cr3t-Pa55&#0033&#035x",  # without semicolons, leading zeros
        "s3cr3t-Pa55&amp;excl;&amp;num;x",  # escaped twice
        "s3cr3t-Pa55%26%2333%3B%26num%3Bx",  # references, percent-encoded
        "s3cr3t-Pa55%2521%2523x",  # percent-encoded twice
        "S3CR3T-pA55!#X",  # another letter case
        "\\u0073\\u0033cr3t-Pa55!#x",  # JSON unicode escapes
        "\\\\u0073\\\\u0033cr3t-Pa55!#x",  # ... escaped again
        "czNjcjN0LVBhNTUhI3",  # base64 (its own characters)
        "QUJDczNjcjN0LVBhNTUhI3hERUY",  # base64 of it inside longer data
        "QUJzM2NyM3QtUGE1NSEjeERF",  # ... at another offset
        "QXMzY3IzdC1QYTU1ISN4",  # ... and the third
    ],
)
def test_redact_encoded_forms(form: str) -> None:
    text = f"see {form} here"
    redacted = Secrets({"PW": VALUE}).redact(text)
    assert "{{PW}}" in redacted and "cr3t" not in redacted.lower(), redacted


def test_base64_only_for_long_enough_values() -> None:
    # A short value's base64 would be a few letters found in any base64 text: only its other forms count.
    assert Secrets({"PIN": "1234"}).redact("MTIzNA== and aGVsbG8=") == "MTIzNA== and aGVsbG8="
    assert Secrets({"PIN": "1234"}).redact("&#49;234") == "{{PIN}}"


def test_shortened_text_is_redacted_before_it_is_cut() -> None:
    secrets = Secrets({"PW": VALUE})
    text = "x" * 95 + VALUE
    assert shorten(text, 100, secrets=secrets) == "x" * 95 + "{{PW…"
    assert shorten(text, 100) == "x" * 95 + "{{PW…"  # by every live Secrets
    assert shorten("short", 100) == "short"
    answer = describe_action(Answer(content="y" * 115 + VALUE))
    assert "s3cr" not in answer and answer.endswith('{{PW…"')
    assert "s3cr" not in short(RuntimeError("z" * 190 + VALUE))


def test_well_formed_replaces_only_lone_surrogates() -> None:
    assert well_formed("plain") == "plain"
    assert well_formed("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert well_formed("pair \U0001f600 é") == "pair \U0001f600 é"  # a valid pair is one character here
    well_formed("\udc80" * 3).encode("utf-8")
