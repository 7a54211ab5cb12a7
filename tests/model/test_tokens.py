"""Token-level records: a role with ``return_tokens`` asks its server for the tokens of each request
(vLLM's ``return_token_ids`` and ``logprobs``) and keeps them on the call's record, one per reply;
without it nothing is asked and nothing kept."""

from __future__ import annotations

import json
from typing import Any

import pytest

from webagent.model.parsing import extract_json
from webagent.model.replies import read_tokens
from webagent.records import TokenRecord
from webagent.testing.tokens import IMAGE_TOKEN_ID

from ..conftest import ServerFactory
from .test_client import MESSAGES, client, validator_script

ASKED = {"return_token_ids": True, "logprobs": True, "return_tokens_as_token_ids": True}


async def test_tokens_are_asked_for_and_kept_one_record_per_reply(model_server: ServerFactory) -> None:
    faults = [{"role": "validator", "nth": 1, "kind": "malformed"}]  # the first reply needs a repair
    async with model_server(validator_script(faults=faults)) as server:
        c = client(server, return_tokens=True)
        value, call = await c.call(MESSAGES, extract_json)
        await c.aclose()
        requests = list(server.requests)
    assert value["success"] is True and len(call.raw) == 2
    assert all(ASKED.items() <= r.extra.items() for r in requests)
    assert call.tokens is not None and len(call.tokens) == len(call.raw) == 2
    first, second = call.tokens
    assert len(second.prompt_token_ids) > len(first.prompt_token_ids) > 0  # the repair's prompt holds the first
    for tokens in call.tokens:
        assert len(tokens.logprobs) == len(tokens.token_ids) > 0 and all(p <= 0 for p in tokens.logprobs)
    assert call.usage.prompt_tokens == len(first.prompt_token_ids) + len(second.prompt_token_ids)
    assert call.usage.completion_tokens == len(first.token_ids) + len(second.token_ids)
    assert call.model_dump()["tokens"][1]["token_ids"] == second.token_ids  # kept in the step record


async def test_nothing_is_asked_or_kept_by_default(model_server: ServerFactory) -> None:
    async with model_server(validator_script()) as server:
        c = client(server)
        _, call = await c.call(MESSAGES, extract_json)
        await c.aclose()
        (request,) = server.requests
    assert call.tokens is None
    assert not set(ASKED) & set(request.extra)


def body(choice: dict[str, Any], **top: Any) -> bytes:
    return json.dumps({"choices": [{"message": {"content": "hi"}, **choice}], **top}).encode()


def entry(token: str, logprob: Any) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": [], "top_logprobs": []}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (  # vLLM 0.10.2+: the ids beside the choice and the prompt, a logprob per token
            body(
                {"token_ids": [7, 8], "logprobs": {"content": [entry("token_id:7", -0.5), entry("token_id:8", 0)]}},
                prompt_token_ids=[1, 2, IMAGE_TOKEN_ID],
            ),
            TokenRecord(prompt_token_ids=[1, 2, IMAGE_TOKEN_ID], token_ids=[7, 8], logprobs=[-0.5, 0.0]),
        ),
        (  # an older vLLM: no return_token_ids, the completion's ids read from its logprobs
            body({"logprobs": {"content": [entry("token_id:7", -0.5), entry("token_id:9", -1.25)]}}),
            TokenRecord(token_ids=[7, 9], logprobs=[-0.5, -1.25]),
        ),
        (body({}), TokenRecord()),  # a server that gives none
        (  # what cannot be lined up is left out, not half kept
            body({"token_ids": [7, "8"], "logprobs": {"content": [entry("a", -0.5), entry("b", None)]}}),
            TokenRecord(),
        ),
        (b"not json", TokenRecord()),
    ],
)
def test_the_tokens_of_a_reply_are_read_as_vllm_gives_them(raw: bytes, expected: TokenRecord) -> None:
    assert read_tokens(raw) == expected
