"""The MCP server's human hand-off: the policy's ``ask_user`` forwarded to the client as an elicitation.

The client shows the question to its user (or answers it itself) and sends back ``{"answer": ...}``;
the run waits for it with its browser open. A client that declines, cancels, or cannot elicit
(it did not declare the capability) gives no answer: the run ends with stop reason
``needs_human``, which the tool returns as such.
"""

from __future__ import annotations

from typing import Any

import structlog
from pydantic import BaseModel, Field

from ..loop import HumanHandler, HumanRequest

__all__ = ["Answer", "elicitation_asker"]

log = structlog.get_logger("webagent.mcp")


class Answer(BaseModel):
    """What the client sends back."""

    answer: str = Field(description="Your answer to the web agent's question")


def elicitation_asker(ctx: Any) -> HumanHandler:
    """A handler forwarding each question to the client of the tool call ``ctx`` (an MCP ``Context``)."""

    async def ask(request: HumanRequest) -> str | None:
        message = f"The web agent needs you (at {request.url}): {request.question}"
        try:
            result = await ctx.elicit(message, Answer)
        except Exception as exc:  # the client cannot elicit (no capability, an error): nobody answers
            log.info("mcp_elicitation_failed", error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return None
        if result.action != "accept":
            log.info("mcp_elicitation_refused", action=result.action)
            return None
        answer: str = result.data.answer
        return answer

    return ask
