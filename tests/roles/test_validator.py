"""The validator's reply: parsed leniently, or a ReplyParseError naming what is wrong (properties)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from webagent.model.parsing import ReplyParseError, parse_reply
from webagent.roles.validator import ValidatorReply

from ..strategies import JSON_VALUES, MESSY_TEXT, PROPERTIES

_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=80)


@PROPERTIES
@given(
    success=st.booleans(),
    feedback=_TEXT,
    extra=st.dictionaries(st.sampled_from(["reason", "score", "notes"]), JSON_VALUES, max_size=2),
    wrap=st.sampled_from(["{}", "```json\n{}\n```", "Verdict: {} (end)", "```\n{}\n```\nThat is all."]),
)
def test_verdicts_round_trip(success: bool, feedback: str, extra: dict[str, Any], wrap: str) -> None:
    body = json.dumps({**extra, "success": success, "feedback": feedback})
    reply = parse_reply(wrap.replace("{}", body, 1), ValidatorReply)
    assert (reply.success, reply.feedback) == (success, feedback)


_VALUES = st.one_of(st.booleans(), st.sampled_from(["true", "no", "yes", "0", "1"]), _TEXT, JSON_VALUES)
OBJECTS = st.fixed_dictionaries({}, optional={"success": _VALUES, "feedback": _VALUES, "other": JSON_VALUES})


@PROPERTIES
@given(data=OBJECTS)
def test_any_verdict_object_parses_or_names_the_field(data: dict[str, Any]) -> None:
    try:
        reply = parse_reply(json.dumps(data), ValidatorReply)
    except ReplyParseError as exc:
        event("rejected")
        message = str(exc)
        assert message.startswith("the reply does not match the schema (")
        assert "success" in message or "feedback" in message
    else:
        event("accepted")
        assert isinstance(reply.success, bool) and isinstance(reply.feedback, str)
        assert "success" in data and "feedback" in data


@PROPERTIES
@given(text=MESSY_TEXT)
def test_any_text_parses_or_raises_a_reply_parse_error(text: str) -> None:
    try:
        reply = parse_reply(text, ValidatorReply)
    except ReplyParseError as exc:
        assert str(exc)
    else:
        assert isinstance(reply.success, bool)
