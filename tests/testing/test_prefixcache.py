"""The offline server's simulated vLLM prefix cache: blocks, chaining, images, LRU, the counters."""

from __future__ import annotations

import base64
import json
from io import BytesIO
from typing import Any

import pytest
from openai import AsyncOpenAI
from PIL import Image

from webagent.batch.servermetrics import parse_prometheus
from webagent.families import get_family
from webagent.testing.images import image_digests
from webagent.testing.prefixcache import (
    ImageRef,
    PrefixCache,
    family_of,
    image_refs,
    prompt_tokens,
    reply_tokens,
    request_tokens,
)
from webagent.testing.server import FakeModelServer
from webagent.testing.server import main as server_main

from .test_server import SCRIPT, policy_text


def _jpeg(size: tuple[int, int], color: tuple[int, int, int]) -> str:
    buf = BytesIO()
    Image.new("RGB", size, color).save(buf, "JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()


def _user(text: str, url: str | None = None, **part: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if url is not None:
        content.append({"type": "image_url", "image_url": {"url": url}, **part})
    return {"role": "user", "content": content}


def _tokens(messages: list[dict[str, Any]], family: str = "holo1.5", tiles: int = 12) -> list[Any]:
    raw = json.dumps({"messages": messages}).encode()
    refs = image_refs(messages, image_digests(raw))
    return prompt_tokens(messages, refs, family=get_family(family), max_num_tiles=tiles)


def test_a_repeated_prompt_hits_every_full_block_but_the_last_token() -> None:
    cache = PrefixCache()
    tokens = [f"t{i}" for i in range(100)]
    assert cache.lookup(tokens).cached_tokens == 0
    assert cache.lookup(tokens).cached_tokens == 96  # 6 full blocks of 16; the 100th token is computed
    exact = [f"t{i}" for i in range(64)]
    assert cache.lookup(exact).cached_tokens == 48  # never all of it: the last block is recomputed


def test_reuse_stops_at_the_first_changed_token_even_if_later_blocks_match() -> None:
    cache = PrefixCache()
    cache.lookup([f"t{i}" for i in range(160)])
    changed = [f"t{i}" for i in range(160)]
    changed[40] = "x"
    assert cache.lookup(changed).cached_tokens == 32  # blocks 0 and 1; block 2 holds the change, the chain breaks


def test_images_are_bound_to_their_bytes_or_their_uuid() -> None:
    red, blue = _jpeg((1260, 784), (200, 0, 0)), _jpeg((1260, 784), (0, 0, 200))
    system = {"role": "system", "content": "You are a web agent. " * 20}
    first = _tokens([system, _user("Step 1", red)])
    assert len(first) > 1260  # the image counts 1,260 tokens (45 x 28 patches of 28 px)
    cache = PrefixCache()
    cache.lookup(first)
    same_text_other_image = _tokens([system, _user("Step 1", blue)])
    hit = cache.lookup(same_text_other_image).cached_tokens
    assert 0 < hit < len(first) - 1260  # the system prompt and the text, not the image
    # A uuid stands for the image: the same uuid hits whatever the bytes.
    cache = PrefixCache()
    cache.lookup(_tokens([system, _user("Step 1", red, uuid="shot-1")]))
    assert cache.lookup(_tokens([system, _user("Step 1", blue, uuid="shot-1")])).cached_tokens > 1260


def test_the_family_sets_the_image_tokens() -> None:
    shot = _jpeg((1024, 512), (1, 2, 3))
    counts = [
        sum(isinstance(t, tuple) for t in _tokens([_user("x", shot)], family, tiles))
        for family, tiles in (("holo1.5", 12), ("holo2", 12), ("holotron", 12), ("holotron", 1))
    ]
    assert counts == [37 * 18, 32 * 16, 3 * 256, 256]  # holo1.5 resizes to 1036x504; 2x1 tiles even with 12
    assert family_of("Hcompany/Holotron-12B").name == "holotron" and family_of("Hcompany/Holo2-8B").name == "holo2"
    assert family_of("Hcompany/Holo1-7B").name == "holo1" and family_of("anything").name == "holo1.5"
    assert family_of("Hcompany/Holo-3.1-35B-A3B").name == "holo3.1" and family_of("holo3-1-35b-a3b").name == "holo3.1"
    assert family_of("Hcompany/Holo3-35B-A3B").name == "holo3"


def test_the_tools_offered_are_part_of_the_prompt_after_the_system_prompt() -> None:
    """A chat template renders the request's ``tools`` into the system turn (Qwen's, before the
    first message after it), and vLLM keeps them there even with ``tool_choice: "none"`` (unless
    served with --exclude-tools-when-tool-choice-none): other tools, another prompt from there on."""
    system = {"role": "system", "content": "You are a web agent. " * 20}
    user = _user("Step 1")
    tools = [{"type": "function", "function": {"name": "click", "parameters": {"type": "object"}}}]
    plain = request_tokens({}, [system, user], [], get_family("holo3"))
    offered = request_tokens({"tools": tools}, [system, user], [], get_family("holo3"))
    assert len(offered) > len(plain) + len(json.dumps(tools)) // 4 - 2
    assert offered[: len(system["content"]) // 4] == plain[: len(system["content"]) // 4]  # the system prompt first
    cache = PrefixCache()
    cache.lookup(offered)
    other = [{**tools[0], "function": {**tools[0]["function"], "name": "tap"}}]
    hit = cache.lookup(request_tokens({"tools": other}, [system, user], [], get_family("holo3"))).cached_tokens
    assert hit <= len(system["content"]) // 4 + 16  # the system prompt only
    same = request_tokens({"tools": tools, "tool_choice": "none"}, [system, user], [], get_family("holo3"))
    assert cache.lookup(same).cached_tokens == (len(offered) - 1) // 16 * 16


def test_least_recently_used_blocks_are_evicted_a_request_s_tail_before_its_head() -> None:
    cache = PrefixCache(capacity=4)
    a, b = [f"a{i}" for i in range(49)], [f"b{i}" for i in range(49)]
    cache.lookup(a)  # 3 blocks
    cache.lookup(b)  # 3 more: a's last two blocks go, its first stays
    assert len(cache) == 4
    assert cache.lookup(a).cached_tokens == 16  # its head block survived; the chain breaks after it
    # A shared head (a system prompt) outlives the conversations' tails under pressure.
    cache = PrefixCache(capacity=3)
    head = [f"h{i}" for i in range(32)]
    cache.lookup([*head, *[f"x{i}" for i in range(33)]])  # 4 full blocks in 3: x's last one goes
    assert cache.lookup([*head, *[f"z{i}" for i in range(20)]]).cached_tokens == 32


def test_image_digests_follow_the_data_urls_and_skip_quoted_text() -> None:
    shot = _jpeg((64, 64), (9, 9, 9))
    text = 'a page that says "data:image/png;base64,AAAA"'
    messages = [_user(text, shot), _user("again", shot)]
    raw = json.dumps({"messages": messages}).encode()
    digests = image_digests(raw)
    assert len(digests) == 2 and digests[0] == digests[1]
    refs = image_refs(messages, digests)
    assert refs == [ImageRef(digests[0], 64, 64), ImageRef(digests[0], 64, 64)]


async def test_an_append_only_conversation_is_served_from_the_cache_through_the_last_reply() -> None:
    """What a vLLM server would reuse: the whole previous request and the model's reply, so only the
    new turn (its text and screenshot) is prefilled; the counters and usage say so."""
    shots = [_jpeg((1260, 784), (10 * i, 40, 90)) for i in range(3)]
    async with FakeModelServer(SCRIPT) as server:
        client = AsyncOpenAI(base_url=server.base_url("policy"), api_key="x", max_retries=0)
        messages: list[Any] = [{"role": "system", "content": "You are a web agent. " * 50}]
        usages = []
        for step, shot in enumerate(shots, 1):
            messages.append(_user(policy_text("http://shop.test/", step), shot))
            reply = await client.chat.completions.create(model="Hcompany/Holo1.5-7B", messages=messages)
            usages.append(reply.usage)
            messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        await client.close()
        metrics = parse_prometheus((await _get(server.url + "/metrics")).decode())
        stats = server.token_stats["policy"]
    assert usages[0] is not None and usages[1] is not None and usages[2] is not None
    cached = [u.prompt_tokens_details.cached_tokens if u.prompt_tokens_details else None for u in usages]
    assert cached[0] == 0
    for before, usage, hit in zip(usages, usages[1:], cached[1:], strict=False):
        assert hit is not None
        assert hit >= before.prompt_tokens + before.completion_tokens - 16  # the last request and its reply
        assert usage.prompt_tokens - hit < 1260 + 300  # the new turn: a screenshot and some text
    assert metrics["vllm:prefix_cache_queries_total"] == sum(u.prompt_tokens for u in usages)
    assert metrics["vllm:prompt_tokens_total"] == sum(u.prompt_tokens for u in usages)
    assert metrics["vllm:prefix_cache_hits_total"] == sum(h or 0 for h in cached)
    assert stats["requests"] == 3 and stats["max_prompt_tokens"] == usages[2].prompt_tokens
    assert [r.cached_tokens for r in server.requests] == cached


async def test_a_rebuilt_request_reuses_only_what_precedes_its_first_change() -> None:
    """A window request puts the URL and step first: everything after them is prefilled again."""
    shot = _jpeg((1260, 784), (1, 2, 3))
    system = {"role": "system", "content": "You are a web agent. " * 50}
    async with FakeModelServer(SCRIPT) as server:
        client = AsyncOpenAI(base_url=server.base_url("policy"), api_key="x", max_retries=0)
        for step in (1, 2):
            await client.chat.completions.create(
                model="m", messages=[system, _user(policy_text("http://shop.test/", step), shot)]
            )
        await client.close()
    _, second = server.requests
    assert second.cached_tokens < len(system["content"]) // 4 + 200  # the system prompt, not the screenshot
    assert second.prompt_tokens - second.cached_tokens > 1260


async def _get(url: str) -> bytes:
    import asyncio
    import urllib.request

    def fetch() -> bytes:
        with urllib.request.urlopen(url, timeout=5) as response:
            body: bytes = response.read()
            return body

    return await asyncio.to_thread(fetch)


def test_reply_tokens_end_with_the_end_marker() -> None:
    assert reply_tokens("abcdefgh") == ["abcd", "efgh", "<|end|>"]


def test_a_mamba_align_cache_resumes_only_from_a_previous_prompts_checkpoint() -> None:
    """vLLM's align mode for hybrid models: one checkpoint per request, at the last full block of
    its prompt; the next turn of a conversation resumes there, the reply and the tail are prefilled."""
    cache = PrefixCache(block_size=100, checkpoints=True)
    first = [f"t{i}" for i in range(350)]
    assert cache.lookup(first).cached_tokens == 0
    cache.store([*first, "reply"])  # nothing: the reply is not checkpointed
    second = [*first, "reply", *[f"u{i}" for i in range(200)]]
    assert cache.lookup(second).cached_tokens == 300  # first's checkpoint: its 3rd block, not the 4th
    assert cache.lookup(first[:250]).cached_tokens == 0  # no checkpoint inside a shorter prefix
    third = [*second, *[f"v{i}" for i in range(50)]]
    assert cache.lookup(third).cached_tokens == 500  # second's checkpoint (5 full blocks of its 551)


def test_a_cache_of_no_blocks_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        PrefixCache(block_size=0)
    for flag in ("--block-size", "--cache-blocks"):
        with pytest.raises(SystemExit) as exit_:
            server_main(["--script", "x.json", flag, "0"])
        assert exit_.value.code == 2
        assert f"argument {flag}: must be at least 1, got 0" in capsys.readouterr().err


def test_align_mode_takes_the_family_s_block_size(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import webagent.testing.server as server_module

    seen: dict[str, Any] = {}

    async def serve(script: Any, host: str, port: int, **options: Any) -> None:
        seen.update(options)

    monkeypatch.setattr(server_module, "_serve", serve)
    path = tmp_path / "s.json"
    path.write_text("{}")
    assert server_main(["--script", str(path), "--mamba-align", "--family", "holo3"]) == 0
    assert seen["block_size"] == get_family("holo3").serving.align_blocks[0] == 1056 and seen["mamba_align"]
    assert server_main(["--script", str(path), "--mamba-align", "--family", "holo3", "--block-size", "2096"]) == 0
    assert seen["block_size"] == 2096
    assert server_main(["--script", str(path)]) == 0
    assert seen["block_size"] == 16


def test_prefill_is_a_lookup_then_a_store_of_the_prompt_and_its_reply() -> None:
    """The server's one call (the prompt hashed once) leaves the cache as the two calls do."""
    for checkpoints in (False, True):
        prompts = [[f"t{i}" for i in range(n)] + [("img", j) for j in range(40)] for n in (50, 70, 50)]
        replies = [[f"r{i}" for i in range(n)] for n in (30, 5, 40)]
        one, two = PrefixCache(checkpoints=checkpoints), PrefixCache(checkpoints=checkpoints)
        for prompt, reply in zip(prompts, replies, strict=True):
            found = one.prefill(prompt, reply)
            assert found == two.lookup(prompt)
            two.store([*prompt, *reply])
            assert list(one._blocks) == list(two._blocks)
        assert one.lookup(prompts[0] + replies[0]).cached_tokens > 0
