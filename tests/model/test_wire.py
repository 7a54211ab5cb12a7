"""The pre-encoded request body is exactly the JSON of the body."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webagent.images import Frame, Screenshot
from webagent.model.wire import DataURL, encode_chat_body

SHOT = Screenshot(base64.b64encode(b"\xff\xd8jpeg-bytes" * 50).decode(), "image/jpeg", Frame(1280, 800, 1260, 784))


def test_screenshot_data_url_is_built_once_and_safe() -> None:
    assert SHOT.data_url is SHOT.data_url
    assert isinstance(SHOT.data_url, DataURL)
    assert SHOT.image_part() == {"type": "image_url", "image_url": {"url": SHOT.data_url}}


@pytest.mark.parametrize(
    "bad",
    [
        'data:image/png;base64,ab"c',
        "http://x/y.png",
        "data:image/png;base64,a\\b",
        "data:image/png;base64,ab\ncd",
        "data:image/png;base64,ab\x01cd",
        "data:image/png;base64,abc\u00e9",
    ],
)
def test_unsafe_strings_are_not_data_urls(bad: str) -> None:
    with pytest.raises(ValueError):
        DataURL(bad)


def test_an_image_uuid_is_its_content_hash_and_goes_out_exactly() -> None:
    part = SHOT.image_part(uuid=True)
    other = Screenshot(SHOT.b64[:-4] + "AAAA", SHOT.mime, SHOT.frame)
    assert part["uuid"] == SHOT.uuid and len(SHOT.uuid) == 32 and other.uuid != SHOT.uuid
    encoded = encode_chat_body({"messages": [{"role": "user", "content": [part]}]})
    assert json.loads(encoded)["messages"][0]["content"][0] == json.loads(json.dumps(part))
    assert b'"uuid":"' + SHOT.uuid.encode() + b'"}' in encoded


def test_body_equals_plain_json() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "system", "content": 'guidelines "quoted" \\ and ünïcode \u2028'},
            {"role": "user", "content": [{"type": "text", "text": "Task: x\nCurrent URL: y"}, SHOT.image_part()]},
            {"role": "assistant", "content": "prev"},
            {"role": "user", "content": [SHOT.image_part(), {"type": "text", "text": "el"}]},
        ],
        "temperature": 0.0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"a": [1, None]}}},
        "chat_template_kwargs": {"thinking": False},
    }
    assert json.loads(encode_chat_body(body)) == json.loads(json.dumps(body))
    # byte for byte what json.dumps writes (UTF-8, compact; the messages first), non-ASCII text
    # beside the screenshots
    ordered = {"messages": body["messages"]} | body
    assert encode_chat_body(body) == json.dumps(ordered, ensure_ascii=False, separators=(",", ":")).encode()


#: Any text, lone surrogates included (a page's title or text can hold one: JavaScript strings are UTF-16).
ANY_TEXT = st.text(st.characters(exclude_categories=()))


@given(
    st.lists(
        st.one_of(
            st.builds(lambda t: {"type": "text", "text": t}, ANY_TEXT),
            st.just(SHOT.image_part()),
            st.just(SHOT.image_part(uuid=True)),
            st.builds(lambda u: {"type": "image_url", "image_url": {"url": SHOT.data_url}, "uuid": u}, st.text()),
            st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, st.text()),
        ),
        max_size=5,
    ),
    st.dictionaries(st.sampled_from(["model", "temperature", "max_tokens"]), st.integers() | ANY_TEXT, max_size=3),
    ANY_TEXT,
)
def test_any_body_round_trips(parts: list[dict[str, Any]], rest: dict[str, Any], system: str) -> None:
    body = {"messages": [{"role": "user", "content": parts}, {"role": "system", "content": system}], **rest}
    encoded = encode_chat_body(body)
    encoded.decode("utf-8")  # valid UTF-8 on the wire, whatever the text held
    assert json.loads(encoded) == json.loads(json.dumps(body))


def test_a_lone_surrogate_in_a_page_s_text_goes_out_as_json_s_escape() -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "title \ud800 é"}, SHOT.image_part()]}]}
    encoded = encode_chat_body(body)
    assert b'"title \\ud800 \xc3\xa9"' in encoded
    assert json.loads(encoded) == body


@given(st.text(max_size=40))
def test_accepted_data_urls_need_no_json_escaping(payload: str) -> None:
    value = "data:image/jpeg;base64," + payload
    try:
        DataURL(value)
    except ValueError:
        return
    assert json.dumps(value, ensure_ascii=False) == '"' + value + '"'
    assert json.dumps(value) == '"' + value + '"'


def test_a_bad_header_is_refused() -> None:
    for bad in ("data:image/jpeg;base64", "DATA:image/jpeg;base64,abc", "data:image/jpeg;utf8,abc", ""):
        with pytest.raises(ValueError):
            DataURL(bad)


def test_constant_parts_are_encoded_once_and_stay_exact() -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}}
    system = {"role": "system", "content": "guidelines " * 300}
    first = encode_chat_body({"messages": [system], "response_format": response_format, "max_tokens": 5})
    second = encode_chat_body({"messages": [dict(system)], "response_format": response_format, "max_tokens": 7})
    assert json.loads(first)["max_tokens"] == 5 and json.loads(second)["max_tokens"] == 7
    assert json.loads(second)["response_format"] == response_format
    other = {"type": "json_object"}  # another dict: its own encoding, never a stale one
    assert json.loads(encode_chat_body({"messages": [], "response_format": other}))["response_format"] == other
    for n in range(200):  # the caches stay bounded
        encode_chat_body({"messages": [{"role": "system", "content": f"s{n}"}], "x": {"n": n}})
    assert json.loads(encode_chat_body({"messages": [system], "x": {"n": 1}})) == {"messages": [system], "x": {"n": 1}}
