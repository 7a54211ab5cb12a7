"""The validator role: judges a candidate answer against the task and the final screenshots.

It judges in a request of its own (the task, the URL, the answer, the last screenshots), or, as
the policy's model at the policy's server, in the policy's own conversation continued by one turn
with its instructions (``[agent] validator_context``): that request extends the policy's last
one, so the server's prefix cache already holds its screenshots and text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..images import Screenshot
from ..model.client import Message, ModelClient
from ..model.parsing import parse_reply
from ..model.schema import response_format, strict_schema
from ..prompts import render
from ..records import ModelCall, Verdict

__all__ = ["Continuation", "Validator", "ValidatorReply", "continuation_messages", "validator_messages"]

SCHEMA_NAME = "validator_verdict"


class ValidatorReply(BaseModel):
    """The validator's structured reply."""

    model_config = ConfigDict(extra="ignore")

    success: bool = Field(description="True only if the answer completes the task")
    feedback: str = Field(description="What is wrong or missing (or a short confirmation)")


@dataclass(frozen=True, slots=True)
class Continuation:
    """The policy's conversation an answer is judged in: its last request followed by the reply
    given to it (and the answers to its tool calls), what that request carried that the chat
    template renders or the image processor reads (its tools, its tile limit), and the server it
    went to."""

    messages: list[Message]
    fields: dict[str, Any] = field(default_factory=dict)
    endpoint: str | None = None


class Validator:
    def __init__(
        self,
        client: ModelClient,
        *,
        extra_body: dict[str, Any] | None = None,
        follows_policy: bool = False,
        image_uuid: bool = False,
    ) -> None:
        """``extra_body``: what the validator model's family adds to a request (``[validator] family``);
        ``follows_policy``: the validator is the policy's model at the policy's servers;
        ``image_uuid``: its screenshots carry the uuids the policy's do (a server that took them)."""
        self.client = client
        self.extra_body = extra_body
        self.follows_policy = follows_policy
        self.image_uuid = image_uuid

    @property
    def system_prompt(self) -> str:
        return _system_prompt()

    def messages(
        self, goal: str, answer: str, url: str, images: Sequence[Screenshot], expect: str | None = None
    ) -> list[Message]:
        return validator_messages(goal, answer, url, images, expect, uuid=self.image_uuid)

    async def judge(
        self,
        goal: str,
        answer: str,
        url: str,
        images: Sequence[Screenshot],
        *,
        expect: str | None = None,
        conversation: Continuation | None = None,
    ) -> tuple[Verdict, ModelCall]:
        """Judge an answer (and ``expect``, a statement that must hold of the final state) on
        ``images``, or in the policy's ``conversation`` (continued on the policy's server, with
        what its request carried).

        Raises ModelError (with ``.call``) on failure.
        """
        if conversation is None:
            messages, extra_body = self.messages(goal, answer, url, images, expect), self.extra_body
        else:
            messages = continuation_messages(conversation.messages, goal, answer, url, expect)
            extra_body = {**(self.extra_body or {}), **conversation.fields} or None
            if conversation.endpoint is not None:
                self.client.follow(conversation.endpoint)
        reply, call = await self.client.call(
            messages,
            lambda text: parse_reply(text, ValidatorReply),
            response_format=_response_format(),
            extra_body=extra_body,
            repair_hint='Reply with a JSON object {"success": true|false, "feedback": "..."}.',
        )
        return Verdict(success=reply.success, feedback=reply.feedback), call


def validator_messages(
    goal: str,
    answer: str,
    url: str,
    images: Sequence[Screenshot],
    expect: str | None = None,
    *,
    uuid: bool = False,
) -> list[Message]:
    """The validator request's messages (also rebuilt from run directories by ``webagent.training.export``)."""
    text = render("validator_user.jinja", goal=goal, answer=answer, url=url, expect=expect or "")
    content: list[dict[str, object]] = [{"type": "text", "text": text}]
    content += [shot.image_part(uuid=uuid) for shot in images]
    return [{"role": "system", "content": _system_prompt()}, {"role": "user", "content": content}]


def continuation_messages(
    conversation: Sequence[Message], goal: str, answer: str, url: str, expect: str | None = None
) -> list[Message]:
    """The policy's conversation continued by the validator's turn: its instructions and schema,
    the task, the URL and the answer (the screenshots are the conversation's)."""
    text = render("validator_turn.jinja", schema=_schema(), goal=goal, answer=answer, url=url, expect=expect or "")
    return [*conversation, {"role": "user", "content": [{"type": "text", "text": text}]}]


@cache
def _schema() -> str:
    return json.dumps(strict_schema(ValidatorReply), separators=(",", ":"), sort_keys=True)


@cache
def _system_prompt() -> str:
    # Stable across steps and sessions: rendered once, so a server prefix cache can hit.
    return render("validator_system.jinja", schema=_schema())


@cache
def _response_format() -> dict[str, Any]:
    return response_format(SCHEMA_NAME, ValidatorReply)
