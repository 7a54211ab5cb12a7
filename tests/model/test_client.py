"""The model client against the real offline server: retries, Retry-After, timeouts, repair, usage."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from webagent.config import RoleConfig
from webagent.errors import ModelError, ModelReplyError, ModelUnavailableError
from webagent.model.client import ModelClient
from webagent.model.parsing import ReplyParseError, extract_json, loads_well_formed
from webagent.model.replies import read_completion
from webagent.records import RoleUsage

from ..conftest import ServerFactory

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Task: anything\nCandidate answer:\nyes"}]


def validator_script(**extra: Any) -> dict[str, Any]:
    return {"tasks": [{"id": "t", "match": "anything", "policy": [], "validator": {"accept": ["yes"]}}], **extra}


def client(server: Any, **config: Any) -> ModelClient:
    return ModelClient("validator", RoleConfig(base_url=server.base_url("validator"), model="m", **config))


async def test_success_counts_usage(model_server: ServerFactory) -> None:
    async with model_server(validator_script()) as server:
        c = client(server)
        usage = RoleUsage()
        completion = await c.complete(MESSAGES, usage=usage)
        await c.aclose()
    assert extract_json(completion.text)["success"] is True
    assert usage.calls == 1 and usage.prompt_tokens == completion.prompt_tokens > 0
    assert usage.completion_tokens > 0 and usage.latency_s > 0 and usage.retries == 0


async def test_cached_tokens_the_server_reports_are_counted(model_server: ServerFactory) -> None:
    """The offline server's simulated prefix cache reports vLLM's prompt_tokens_details.cached_tokens."""
    long = [{"role": "user", "content": "Task: anything\n" + "context " * 200 + "\nCandidate answer:\nyes"}]
    async with model_server(validator_script()) as server:
        c = client(server)
        usage = RoleUsage()
        await c.complete(long, usage=usage)
        assert usage.cached_tokens == 0
        await c.complete(long, usage=usage)
        await c.aclose()
    assert usage.calls == 2 and usage.prompt_tokens // 2 - 16 <= usage.cached_tokens < usage.prompt_tokens // 2


@pytest.mark.parametrize(
    ("usage", "counts"),
    [
        ({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 8}}, (10, 2, 8)),
        ({"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": None}, (10, 2, 0)),
        (
            {"prompt_tokens": "ten", "completion_tokens": -1, "prompt_tokens_details": {"cached_tokens": True}},
            (0, 0, 0),
        ),
        (None, (0, 0, 0)),
        ({"prompt_tokens": float("inf"), "completion_tokens": 1e400, "prompt_tokens_details": {}}, (0, 0, 0)),
    ],
)
def test_reply_token_counts_are_read_leniently(usage: Any, counts: tuple[int, int, int]) -> None:
    body = json.dumps({"choices": [{"message": {"content": "hi"}}], "usage": usage}).encode()
    assert read_completion(body) == ("hi", *counts)


async def test_retry_after_is_honoured(model_server: ServerFactory) -> None:
    faults = [{"role": "validator", "nth": 1, "kind": "429"}]
    async with model_server(validator_script(faults=faults, retry_after_s=0.6)) as server:
        c = client(server)
        usage = RoleUsage()
        start = time.perf_counter()
        await c.complete(MESSAGES, usage=usage)
        elapsed = time.perf_counter() - start
        await c.aclose()
    assert usage.retries == 1
    assert elapsed >= 0.55  # waited as the server asked, not the 0.5 s default backoff... nor less


async def test_timeout_is_retried_then_succeeds(model_server: ServerFactory) -> None:
    faults = [{"role": "validator", "nth": 1, "kind": "slow"}]
    async with model_server(validator_script(faults=faults, slow_s=5)) as server:
        c = client(server, timeout_s=0.3)
        usage = RoleUsage()
        await c.complete(MESSAGES, usage=usage)
        await c.aclose()
    assert usage.retries == 1 and usage.calls == 1


async def test_persistent_5xx_gives_up_with_clear_error(model_server: ServerFactory) -> None:
    async with model_server(validator_script(fault_rates={"500": 1.0})) as server:
        c = client(server, max_retries=2)
        usage = RoleUsage()
        with pytest.raises(ModelUnavailableError, match=r"kept failing \(HTTP 500.*after 3 attempts"):
            await c.complete(MESSAGES, usage=usage)
        await c.aclose()
        assert server.request_counts["validator"] == 3
    assert usage.failures == 1 and usage.retries == 2


async def test_client_errors_are_not_retried(model_server: ServerFactory) -> None:
    async with model_server(validator_script()) as server:
        c = ModelClient("validator", RoleConfig(base_url=server.url + "/nope/v1", model="m"))
        with pytest.raises(ModelError, match="HTTP 404") as info:
            await c.complete(MESSAGES, usage=RoleUsage())
        await c.aclose()
    assert not isinstance(info.value, ModelUnavailableError)
    assert "check the model name and base URL" in str(info.value)


async def test_repair_quotes_the_parse_error(model_server: ServerFactory) -> None:
    faults = [{"role": "validator", "nth": 1, "kind": "malformed"}]
    async with model_server(validator_script(faults=faults)) as server:
        c = client(server)
        seen: list[str] = []

        def parse(text: str) -> Any:
            seen.append(text)
            return extract_json(text)

        value, call = await c.call(MESSAGES, parse, repair_hint="Reply with JSON.")
        await c.aclose()
        repair_request = server.requests[1]
    assert value["success"] is True
    assert call.usage.repairs == 1 and call.usage.calls == 2 and len(call.raw) == 2
    assert repair_request.messages_count == 3


async def test_second_failure_raises_reply_error_with_the_call(model_server: ServerFactory) -> None:
    faults = [{"role": "validator", "nth": n, "kind": "malformed"} for n in (1, 2)]
    async with model_server(validator_script(faults=faults)) as server:
        c = client(server)

        def parse(text: str) -> Any:
            raise ReplyParseError("nope")

        with pytest.raises(ModelReplyError) as info:
            await c.call(MESSAGES, parse)
        await c.aclose()
    assert info.value.call is not None and info.value.call.usage.failures == 1
    assert len(info.value.call.raw) == 2


def test_a_reply_s_tool_calls_are_read_and_its_reasoning_left_out() -> None:
    message = {
        "content": "I click it.",
        "reasoning": "The button is top right.",
        "reasoning_content": "The button is top right.",
        "tool_calls": [
            {"id": "call_7", "type": "function", "function": {"name": "click", "arguments": '{"element": "OK"}'}},
            {"type": "function", "function": {"name": "scroll", "arguments": {"direction": "down"}}},
            {"type": "function", "function": {"arguments": "{}"}},  # no name: left out
            "junk",
        ],
    }
    text, *_ = read_completion(json.dumps({"choices": [{"message": message}]}).encode())
    assert text == "I click it." and "top right" not in text
    assert [(c.id, c.name, c.arguments) for c in text.tool_calls] == [
        ("call_7", "click", '{"element": "OK"}'),
        ("call_1", "scroll", '{"direction": "down"}'),
    ]


def test_a_reply_s_lone_surrogates_become_replacement_characters() -> None:
    """A JSON escape of half a pair (``"\\ud800"``) decodes to a character UTF-8 cannot carry: the
    step's record and the next request could not be written."""
    raw = b'{"choices": [{"message": {"content": "a \\ud800 b", "tool_calls": [{"function": {"name": "type_text", "arguments": {"text": "x\\udfff"}}}]}}]}'
    text, *_ = read_completion(raw)
    assert text == "a \ufffd b"
    text.encode("utf-8")
    arguments = text.tool_calls[0].arguments  # given as an object: written as JSON, the half pair escaped
    arguments.encode("ascii")
    assert loads_well_formed(arguments) == {"text": "x\ufffd"}  # as the policy's contract reads it
    escaped = b'{"choices": [{"message": {"tool_calls": [{"function": {"name": "t", "arguments": "{\\"text\\": \\"y\\\\ud800\\"}"}}]}}]}'
    (call,) = read_completion(escaped)[0].tool_calls
    assert json.loads(call.arguments) == {"text": "y\ufffd"}  # escaped in the arguments' own JSON too
    paired = b'{"choices": [{"message": {"tool_calls": [{"function": {"name": "t", "arguments": "{\\"t\\": \\"\\\\ud83d\\\\ude00\\"}"}}]}}]}'
    assert read_completion(paired)[0].tool_calls[0].arguments == '{"t": "\\ud83d\\ude00"}'  # as written
    backslash = b'{"choices": [{"message": {"tool_calls": [{"function": {"name": "t", "arguments": "{\\"p\\":\\"C:\\\\\\\\udemo\\"}"}}]}}]}'
    assert read_completion(backslash)[0].tool_calls[0].arguments == '{"p":"C:\\\\udemo"}'  # no surrogate: as written


TOOLS = {
    "tools": [{"type": "function", "function": {"name": "answer", "parameters": {"type": "object", "properties": {}}}}],
    "tool_choice": "required",
    "chat_template_kwargs": {"enable_thinking": True},
}


async def test_a_tool_call_reply_is_repaired_by_answering_its_call(model_server: ServerFactory) -> None:
    """A reply whose tool call cannot be used is answered, as a chat template expects a tool call to
    be, by the call's tool result quoting the error; the second reply's calls are the call's."""
    script = {
        "tasks": [{"id": "t", "match": "anything", "policy": [{"action": {"action": "answer", "content": "yes"}}]}],
        "faults": [],
    }
    async with model_server(script) as server:
        c = ModelClient("policy", RoleConfig(base_url=server.base_url("policy"), model="m"))
        seen: list[Any] = []

        def parse(reply: Any) -> Any:
            seen.append(reply)
            if len(seen) == 1:
                raise ReplyParseError("the answer tool needs its content")
            return reply.tool_calls[0]

        messages = [{"role": "user", "content": "Task: anything\nStep: 1 of 5"}]
        first, call = await c.call(messages, parse, extra_body=TOOLS)
        await c.aclose()
        repair = server.requests[1].messages
    assert first.name == "answer" and json.loads(first.arguments)["content"] == "yes"
    assert seen[0].tool_calls and call.usage.repairs == 1
    assert [m["role"] for m in repair] == ["user", "assistant", "tool"]
    assert repair[1]["tool_calls"][0]["id"] == seen[0].tool_calls[0].id
    assert repair[2]["tool_call_id"] == seen[0].tool_calls[0].id
    assert repair[2]["content"].startswith("Your previous reply could not be used: the answer tool needs its content")
    assert "reasoning" not in json.dumps(repair)  # the reasoning the server returned is not sent back
    assert call.tool_calls == list(seen[1].tool_calls)
