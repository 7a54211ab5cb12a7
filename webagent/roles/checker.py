"""The check role: does a statement hold on the page as it is now? (``Pilot.check``)

One call to the validator's endpoint with the current screenshot (the size the validator's
screenshots have in a run), the URL and the page title; the reply is ``{"holds", "feedback"}``.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..images import Screenshot
from ..model.client import Message, ModelClient
from ..model.parsing import parse_reply
from ..model.schema import response_format, strict_schema
from ..prompts import render
from ..records import ModelCall

__all__ = ["SCHEMA_NAME", "CheckReply", "Checker", "check_messages"]

SCHEMA_NAME = "check_verdict"


class CheckReply(BaseModel):
    """The model's judgement of a statement."""

    model_config = ConfigDict(extra="ignore")

    holds: bool = Field(description="True only if the page as shown makes the statement true")
    feedback: str = Field(description="What on the page makes it hold, or what the page shows instead")


class Checker:
    """Asks the validator model whether a statement holds on one screenshot of a page."""

    def __init__(self, client: ModelClient, *, extra_body: dict[str, Any] | None = None) -> None:
        """``extra_body``: what the validator model's family adds to a request (``[validator] family``)."""
        self.client = client
        self.extra_body = extra_body

    async def check(self, statement: str, url: str, title: str, image: Screenshot) -> tuple[CheckReply, ModelCall]:
        """Judge ``statement``. Raises ModelError (with ``.call``) when the model fails."""
        return await self.client.call(
            check_messages(statement, url, title, image),
            lambda text: parse_reply(text, CheckReply),
            response_format=_response_format(),
            extra_body=self.extra_body,
            repair_hint='Reply with a JSON object {"holds": true|false, "feedback": "..."}.',
        )


def check_messages(statement: str, url: str, title: str, image: Screenshot) -> list[Message]:
    """The check request's messages: the stable system prompt, then the statement, page and screenshot."""
    text = render("check_user.jinja", statement=statement, url=url, title=title)
    content: list[dict[str, object]] = [{"type": "text", "text": text}, image.image_part()]
    return [{"role": "system", "content": _system_prompt()}, {"role": "user", "content": content}]


@cache
def _system_prompt() -> str:
    schema = json.dumps(strict_schema(CheckReply), separators=(",", ":"), sort_keys=True)
    return render("check_system.jinja", schema=schema)


@cache
def _response_format() -> dict[str, Any]:
    return response_format(SCHEMA_NAME, CheckReply)
