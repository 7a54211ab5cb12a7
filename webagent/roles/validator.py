"""The validator role: judges a candidate answer against the task and the final screenshots."""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..images import Screenshot
from ..model.client import Message, ModelClient
from ..model.parsing import parse_reply
from ..model.schema import response_format, strict_schema
from ..prompts import render
from ..records import ModelCall, Verdict

__all__ = ["Validator", "ValidatorReply", "validator_messages"]

SCHEMA_NAME = "validator_verdict"


class ValidatorReply(BaseModel):
    """The validator's structured reply."""

    model_config = ConfigDict(extra="ignore")

    success: bool = Field(description="True only if the answer completes the task")
    feedback: str = Field(description="What is wrong or missing (or a short confirmation)")


class Validator:
    def __init__(self, client: ModelClient, *, extra_body: dict[str, Any] | None = None) -> None:
        """``extra_body``: what the validator model's family adds to a request (``[validator] family``)."""
        self.client = client
        self.extra_body = extra_body

    @property
    def system_prompt(self) -> str:
        return _system_prompt()

    def messages(
        self, goal: str, answer: str, url: str, images: Sequence[Screenshot], expect: str | None = None
    ) -> list[Message]:
        return validator_messages(goal, answer, url, images, expect)

    async def judge(
        self, goal: str, answer: str, url: str, images: Sequence[Screenshot], *, expect: str | None = None
    ) -> tuple[Verdict, ModelCall]:
        """Judge an answer (and ``expect``, a statement that must hold of the final state).

        Raises ModelError (with ``.call``) on failure.
        """
        reply, call = await self.client.call(
            self.messages(goal, answer, url, images, expect),
            lambda text: parse_reply(text, ValidatorReply),
            response_format=_response_format(),
            extra_body=self.extra_body,
            repair_hint='Reply with a JSON object {"success": true|false, "feedback": "..."}.',
        )
        return Verdict(success=reply.success, feedback=reply.feedback), call


def validator_messages(
    goal: str, answer: str, url: str, images: Sequence[Screenshot], expect: str | None = None
) -> list[Message]:
    """The validator request's messages (also rebuilt from run directories by ``webagent.training.export``)."""
    text = render("validator_user.jinja", goal=goal, answer=answer, url=url, expect=expect or "")
    content: list[dict[str, object]] = [{"type": "text", "text": text}]
    content += [shot.image_part() for shot in images]
    return [{"role": "system", "content": _system_prompt()}, {"role": "user", "content": content}]


@cache
def _system_prompt() -> str:
    # Stable across steps and sessions: rendered once, so a server prefix cache can hit.
    schema = json.dumps(strict_schema(ValidatorReply), separators=(",", ":"), sort_keys=True)
    return render("validator_system.jinja", schema=schema)


@cache
def _response_format() -> dict[str, Any]:
    return response_format(SCHEMA_NAME, ValidatorReply)
