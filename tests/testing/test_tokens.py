"""The offline server gives a reply's tokens in vLLM's shape when asked (``return_token_ids``,
``logprobs``, ``return_tokens_as_token_ids``), read here through the real ``openai`` client."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI

from webagent.families import get_family
from webagent.testing.server import FakeModelServer
from webagent.testing.tokens import IMAGE_TOKEN_ID

from .test_prefixcache import _jpeg, _user
from .test_server import SCRIPT, policy_text

MODEL = "Hcompany/Holo1.5-7B"


async def test_an_append_only_conversation_s_token_ids_extend_the_last_request_and_its_reply() -> None:
    """What an RL trainer relies on: turn 2's prompt is turn 1's prompt and completion, then the new turn."""
    shots = [_jpeg((1260, 784), (10 * i, 40, 90)) for i in range(2)]
    asked = {"return_token_ids": True, "return_tokens_as_token_ids": True}
    async with FakeModelServer(SCRIPT) as server:
        client = AsyncOpenAI(base_url=server.base_url("policy"), api_key="x", max_retries=0)
        messages: list[Any] = [{"role": "system", "content": "You are a web agent."}]
        replies = []
        for step, shot in enumerate(shots, 1):
            messages.append(_user(policy_text("http://shop.test/", step), shot))
            reply = await client.chat.completions.create(
                model=MODEL, messages=messages, logprobs=True, extra_body=asked
            )
            replies.append(reply)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        plain = await client.chat.completions.create(model=MODEL, messages=messages[:2])
        again = await client.chat.completions.create(
            model=MODEL, messages=messages[:2], logprobs=True, extra_body=asked
        )
        await client.close()
    first, second = (r.model_dump() for r in replies)
    prompt, completion = first["prompt_token_ids"], first["choices"][0]["token_ids"]
    assert second["prompt_token_ids"][: len(prompt) + len(completion)] == prompt + completion
    assert len(prompt) == first["usage"]["prompt_tokens"] and len(completion) == first["usage"]["completion_tokens"]
    assert prompt.count(IMAGE_TOKEN_ID) == get_family("holo1.5").image_tokens(1260, 784)
    content = first["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in content] == [f"token_id:{i}" for i in completion]
    assert all(-3 <= e["logprob"] <= 0 for e in content)
    assert again.model_dump()["choices"][0]["logprobs"] == first["choices"][0]["logprobs"]  # the same reply, the same
    dumped = plain.model_dump()
    assert "prompt_token_ids" not in dumped and dumped["choices"][0].get("token_ids") is None  # not asked: not given


async def test_logprobs_alone_name_their_tokens_by_text() -> None:
    async with FakeModelServer(SCRIPT) as server:
        client = AsyncOpenAI(base_url=server.base_url("policy"), api_key="x", max_retries=0)
        reply = await client.chat.completions.create(
            model=MODEL, messages=[_user(policy_text("http://shop.test/", 1))], logprobs=True
        )
        await client.close()
    data = reply.model_dump()
    assert "prompt_token_ids" not in data
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.content is not None
    text = "".join(e.token for e in logprobs.content)
    assert text == (reply.choices[0].message.content or "") + "<|end|>"  # the reply, then its end token
