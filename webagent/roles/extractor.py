"""The extract role: structured data read off the page as it is now (``Pilot.extract``).

One call to the policy's endpoint with the current screenshot, the URL, the page title and the
JSON schema of the result, which also constrains the reply (``response_format``, strict). The
reply is validated by the caller's ``parse`` (a Pydantic model's, or a JSON schema's); a reply
that does not validate gets the client's one repair request, then ``ExtractionError``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, TypeVar

import jsonschema
from pydantic import BaseModel

from ..errors import ExtractionError, InputError, ModelReplyError
from ..images import Screenshot
from ..model.client import Message, ModelClient
from ..model.parsing import ReplyParseError, extract_json, parse_reply
from ..model.schema import json_schema_format, strict_json_schema
from ..prompts import render
from ..records import ModelCall

__all__ = ["SCHEMA_NAME", "ExtractionSchema", "Extractor", "extract_messages"]

SCHEMA_NAME = "extraction"
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


class ExtractionSchema:
    """What an extraction asks for: its strict JSON schema, a name for messages, and how a reply is validated."""

    def __init__(self, schema: Mapping[str, Any], parse: Callable[[str], Any], *, name: str = "") -> None:
        self.schema = strict_json_schema(schema)
        self.parse = parse
        self.name = name or str(schema.get("title") or "the JSON schema")

    @classmethod
    def of_model(cls, model: type[M]) -> ExtractionSchema:
        """The schema of a Pydantic model; replies validate to an instance of it."""
        return cls(model.model_json_schema(), lambda text: parse_reply(text, model), name=model.__name__)

    @classmethod
    def of_json_schema(cls, schema: dict[str, Any], *, what: str = "the schema") -> ExtractionSchema:
        """A caller's JSON schema; replies validate against it (``jsonschema``). InputError naming
        ``what`` when it is not a valid JSON schema."""
        try:
            validator_class = jsonschema.validators.validator_for(schema)
            validator_class.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise InputError(f"{what} is not a valid JSON schema: {exc.message}") from None
        validator = validator_class(schema)

        def parse(text: str) -> Any:
            value = extract_json(text)
            error = jsonschema.exceptions.best_match(validator.iter_errors(value))
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "the reply"
                raise ReplyParseError(f"the reply does not match the schema ({where}: {error.message})")
            return value

        return cls(schema, parse, name=str(schema.get("title") or "the JSON schema given"))

    @property
    def text(self) -> str:
        """The schema as sent (compact, sorted keys)."""
        return json.dumps(self.schema, separators=(",", ":"), sort_keys=True)

    @property
    def digest(self) -> str:
        """A short hash of the schema (a replay cache key part: another schema, another answer)."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]


class Extractor:
    """Asks the policy model for data on one screenshot of a page."""

    def __init__(self, client: ModelClient, *, extra_body: dict[str, Any] | None = None) -> None:
        """``extra_body``: what the policy model's family adds to a single-shot request (``PolicyImages.single_body``)."""
        self.client = client
        self.extra_body = extra_body

    async def extract(
        self, what: str, url: str, title: str, image: Screenshot, schema: ExtractionSchema
    ) -> tuple[Any, ModelCall]:
        """The validated value. Raises ExtractionError (with ``.call``) when the reply does not
        validate after one repair request, ModelError when the model fails otherwise."""
        try:
            return await self.client.call(
                extract_messages(what, url, title, image, schema.text),
                schema.parse,
                response_format=json_schema_format(SCHEMA_NAME, schema.schema),
                extra_body=self.extra_body,
                repair_hint="Reply with one JSON object that follows the JSON schema given.",
            )
        except ModelReplyError as exc:
            problem = str(exc).removeprefix(f"the {self.client.role} model's reply was unusable: ")
            err = ExtractionError(
                f"could not extract {what!r} as {schema.name}: the {self.client.role} model's reply did not "
                f"validate, even after a repair request ({problem})",
                role=exc.role,
                raw=exc.raw,
            )
            err.call = exc.call
            raise err from None


def extract_messages(what: str, url: str, title: str, image: Screenshot, schema: str) -> list[Message]:
    """The extraction request's messages: the stable system prompt, then what to extract, the schema, the page."""
    text = render("extract_user.jinja", what=what, url=url, title=title, schema=schema)
    content: list[dict[str, object]] = [{"type": "text", "text": text}, image.image_part()]
    return [{"role": "system", "content": _system_prompt()}, {"role": "user", "content": content}]


@cache
def _system_prompt() -> str:
    return render("extract_system.jinja")
