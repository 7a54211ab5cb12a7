"""A caller's JSON schema as an extraction schema (the one builder the shell and MCP share)."""

from __future__ import annotations

import pytest

from webagent.errors import InputError
from webagent.model.parsing import ReplyParseError
from webagent.roles.extractor import ExtractionSchema

PRODUCT = {
    "title": "Product",
    "type": "object",
    "properties": {"name": {"type": "string"}, "price": {"type": "number"}},
    "required": ["name", "price"],
}


def test_a_reply_that_follows_the_schema_is_its_value() -> None:
    schema = ExtractionSchema.of_json_schema(PRODUCT)
    assert schema.parse('{"name": "lamp", "price": 12.5}') == {"name": "lamp", "price": 12.5}
    assert schema.name == "Product"
    assert schema.schema["additionalProperties"] is False  # made strict for response_format


def test_a_reply_that_does_not_follow_it_names_where() -> None:
    schema = ExtractionSchema.of_json_schema(PRODUCT)
    with pytest.raises(ReplyParseError, match=r"price: 'cheap' is not of type 'number'"):
        schema.parse('{"name": "lamp", "price": "cheap"}')


def test_a_schema_that_is_not_one_is_an_input_error_naming_the_argument() -> None:
    with pytest.raises(InputError, match=r"^json_schema is not a valid JSON schema: 'nonsense' is not valid"):
        ExtractionSchema.of_json_schema({"type": "nonsense"}, what="json_schema")
    with pytest.raises(InputError, match=r"^the schema is not a valid JSON schema"):
        ExtractionSchema.of_json_schema({"type": 3})
