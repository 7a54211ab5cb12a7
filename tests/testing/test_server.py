"""Tests for the offline fake model server, driven through the real ``openai`` client over HTTP."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from io import BytesIO
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from PIL import Image

from webagent.testing.images import image_size, shrink_images
from webagent.testing.script import load_script, parse_policy_prompt
from webagent.testing.server import MAX_BODY, READY_PREFIX, TIMINGS_KEPT, FakeModelServer, quantiles

GOAL = "Find the price of the Blue Widget in the catalog."

SCRIPT: dict[str, Any] = {
    "viewport": {"width": 1280, "height": 800},
    "localizer_profile": "holo1.5",
    "elements": {"search box": [640, 120], "result": [1, 1]},
    "tasks": [
        {
            "id": "catalog-price",
            "match": "price of the Blue Widget",
            "elements": {"first result": [300, 250]},
            "policy": [
                {
                    "when": {"step": 1},
                    "note": "on the home page",
                    "thought": "search for it",
                    "action": {
                        "action": "write_element",
                        "element": "search box",
                        "content": "blue widget",
                        "press_enter": True,
                    },
                },
                {"when": {"last_action": "-> error"}, "action": {"action": "go_back"}},
                {
                    "when": {"url": "/search"},
                    "action": {"action": "click_element", "element": "first result"},
                },
                {
                    "when": {"url": "/product/", "feedback": "currency"},
                    "action": {"action": "answer", "content": "$12.50"},
                },
                {
                    "when": {"url": "/product/", "no_feedback": True},
                    "action": {"action": "answer", "content": "12.50"},
                },
                {"when": {"url": "/product/"}, "action": {"action": "answer", "content": "twelve fifty"}},
                {"when": {"final": True}, "action": {"action": "answer", "content": "I could not finish"}},
            ],
            "validator": {
                "accept": ["$12.50"],
                "url": "/product/",
                "feedback": "The answer must include the currency symbol.",
            },
        },
        {
            "id": "no-validator",
            "match": "say hello",
            "policy": [{"action": {"action": "answer", "content": "hello"}}],
        },
    ],
}


# ---------------------------------------------------------------- helpers


def png_url(w: int, h: int, fmt: str = "PNG") -> str:
    buf = BytesIO()
    Image.new("RGB", (w, h), (200, 220, 240)).save(buf, format=fmt)
    mime = "jpeg" if fmt == "JPEG" else "png"
    return f"data:image/{mime};base64,{base64.b64encode(buf.getvalue()).decode()}"


def policy_text(
    url: str,
    step: int,
    *,
    goal: str = GOAL,
    actions: tuple[str, ...] = (),
    feedback: str | None = None,
    final: bool = False,
) -> str:
    lines = [f"Task: {goal}", f"Current URL: {url}", f"Step: {step} of 10", "Notes so far:", "- none"]
    if actions:
        lines += ["Recent actions:", *actions]
    if feedback is not None:
        lines += ["Validator feedback on your last answer:", feedback, ""]
    if final:
        lines += ["", "FINAL STEP: answer now."]
    return "\n".join(lines)


def policy_messages(text: str, image: str | None = None) -> list[Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if image:
        content.insert(0, {"type": "image_url", "image_url": {"url": image}})
    return [{"role": "system", "content": "You are a web agent."}, {"role": "user", "content": content}]


def validator_messages(answer: str, url: str, goal: str = GOAL) -> list[Any]:
    text = f"Task: {goal}\nCurrent URL: {url}\nCandidate answer:\n{answer}"
    return [{"role": "user", "content": text}]


def localizer_messages(element: str, image: str) -> list[Any]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": image}},
                {"type": "text", "text": f"Localize an element on the GUI image.\nInstruction: {element}"},
            ],
        }
    ]


def client(server: FakeModelServer | str, role: str | None = "policy", **kw: Any) -> AsyncOpenAI:
    """A real OpenAI client for one role (``role=None``: the plain ``/v1`` endpoint)."""
    url = server if isinstance(server, str) else server.url
    kw.setdefault("max_retries", 0)
    # Plain HTTP: skipping CA loading makes a client ~10x cheaper to build.
    http = openai.DefaultAsyncHttpxClient(verify=False)
    return AsyncOpenAI(base_url=f"{url}/{role}/v1" if role else f"{url}/v1", api_key="x", http_client=http, **kw)


async def ask(server: FakeModelServer, role: str, messages: Any, model: str = "m", **kw: Any) -> str:
    async with client(server, role) as c:
        r = await c.chat.completions.create(model=model, messages=messages, **kw)
    return r.choices[0].message.content or ""


async def act(server: FakeModelServer, text: str) -> dict[str, Any]:
    reply: dict[str, Any] = json.loads(await ask(server, "policy", policy_messages(text)))
    return reply


def raw_http(method: str, url: str, body: bytes | None = None) -> tuple[int, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with opener.open(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer(SCRIPT) as srv:
        yield srv


def with_(**changes: Any) -> dict[str, Any]:
    return {**SCRIPT, **changes}


# ---------------------------------------------------------------- policy


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (policy_text("http://shop.test/", 1), {"action": "write_element", "content": "blue widget"}),
        (policy_text("http://shop.test/search?q=blue", 2), {"action": "click_element"}),
        (
            policy_text("http://shop.test/search", 3, actions=('- step 2: click_element "x" -> error',)),
            {"action": "go_back"},
        ),
        (policy_text("http://shop.test/product/7", 3), {"content": "12.50"}),
        (
            policy_text("http://shop.test/product/7", 4, feedback="Add the currency symbol."),
            {"content": "$12.50"},
        ),
        (
            policy_text("http://shop.test/product/7", 4, feedback="Wrong product."),
            {"content": "twelve fifty"},
        ),
        (policy_text("http://shop.test/cart", 9, final=True), {"content": "I could not finish"}),
        (policy_text("http://shop.test/cart", 5), {"content": "NO SCRIPTED ACTION"}),
        (policy_text("http://shop.test/", 1, goal="Book a flight"), {"content": "NO SCRIPTED ACTION"}),
    ],
)
async def test_policy_rules(server: FakeModelServer, text: str, expected: dict[str, Any]) -> None:
    reply = await act(server, text)
    assert set(reply) == {"note", "thought", "action"}
    assert expected.items() <= reply["action"].items()


async def test_policy_reply_shape_and_log(server: FakeModelServer) -> None:
    async with client(server) as c:
        r = await c.chat.completions.create(
            model="my-policy",
            messages=policy_messages(policy_text("http://shop.test/", 1), png_url(640, 400)),
            temperature=0.0,
            max_tokens=300,
            response_format={"type": "json_schema", "json_schema": {"name": "policy_reply", "schema": {}}},
            extra_body={"chat_template_kwargs": {"enable_thinking": False}},
        )
    assert r.object == "chat.completion" and r.model == "my-policy"
    assert r.choices[0].finish_reason == "stop" and r.choices[0].message.role == "assistant"
    reply = json.loads(r.choices[0].message.content or "")
    assert reply["note"] == "on the home page" and reply["thought"] == "search for it"
    assert r.usage is not None and r.usage.prompt_tokens > 308  # 640x400 image = 22*14 patches + text
    assert server.base_url("policy") == server.url + "/policy/v1"
    rec = server.requests[-1]
    assert (rec.role, rec.task, rec.step, rec.fault, rec.model) == (
        "policy",
        "catalog-price",
        1,
        None,
        "my-policy",
    )
    assert rec.system == "You are a web agent." and rec.text.startswith("Task: " + GOAL)
    assert (rec.n_images, rec.image_sizes, rec.messages_count) == (1, [[640, 400]], 2)
    assert rec.extra["temperature"] == 0.0 and rec.extra["max_tokens"] == 300
    assert rec.extra["chat_template_kwargs"] == {"enable_thinking": False}
    assert rec.extra["response_format"]["json_schema"]["name"] == "policy_reply"
    status, log = await asyncio.to_thread(raw_http, "GET", server.url + "/_requests")
    assert status == 200 and log[-1]["task"] == "catalog-price"
    assert "base64" not in json.dumps(log)


def test_parse_policy_prompt_feedback_block() -> None:
    text = policy_text("http://a/b", 3, actions=("- step 1: x -> ok", "- step 2: y -> ok"), feedback="l1\nl2")
    state = parse_policy_prompt(text + "\nunrelated")
    assert (state.url, state.step, state.last_action) == ("http://a/b", 3, "- step 2: y -> ok")
    assert state.feedback == "l1\nl2" and not state.final
    assert parse_policy_prompt("Step: 2").feedback is None


def _data_url(fmt: str, size: tuple[int, int], **save: Any) -> str:
    buf = BytesIO()
    Image.new("RGB", size, (30, 90, 200)).save(buf, fmt, **save)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize(
    ("fmt", "save"),
    [
        ("JPEG", {}),
        ("JPEG", {"progressive": True}),
        ("JPEG", {"icc_profile": os.urandom(9000)}),  # the size marker lies past the first 4 kB
        ("PNG", {}),
        ("WEBP", {}),  # not read from the header: decoded
        ("GIF", {}),
    ],
)
def test_image_size_reads_headers(fmt: str, save: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    url = _data_url(fmt, (1260, 787), **save)
    assert image_size(url) == (1260, 787)
    if fmt in ("JPEG", "PNG"):  # read from the header alone, without decoding the image
        monkeypatch.setattr(Image, "open", lambda *a, **k: pytest.fail("decoded"))
        assert image_size(url) == (1260, 787)


def test_image_size_rejects_what_is_not_an_image() -> None:
    assert image_size("https://example.com/a.png") is None
    assert image_size("data:image/jpeg;base64,bm90IGFuIGltYWdl") is None
    assert image_size("data:image/jpeg;base64,/9j/" + "A" * 40) is None  # a JPEG start, then nothing valid
    assert image_size("data:image/png;base64,%%%") is None


async def test_a_server_without_request_log_answers_the_same_reading_image_heads_only() -> None:
    """Benchmarks run the server with --no-record, which parses only each image's head."""
    url = _data_url("JPEG", (1260, 784), icc_profile=os.urandom(9000))
    quoted = 'Page text: "data:image/png;base64,' + "A" * 20000 + '" and \\"data:image/gif;base64,R0lG\\"'
    text = policy_text("http://shop.test/", 1) + "\n" + quoted
    messages = [
        {"role": "user", "content": [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]}
    ]
    body = json.dumps({"model": "m", "messages": messages}).encode()
    payload = len(url) - len("data:image/jpeg;base64,")
    assert payload > 20_000 and len(body) - len(shrink_images(body)) == payload - 16384  # only the image is cut
    assert json.loads(shrink_images(body))["messages"][0]["content"][0]["text"] == text
    replies = []
    for record in (True, False):
        async with FakeModelServer(SCRIPT, record=record) as srv:
            status, reply = await asyncio.to_thread(
                raw_http, "POST", srv.base_url("policy") + "/chat/completions", body
            )
            assert status == 200
            replies.append(reply)
    assert replies[0]["usage"] == replies[1]["usage"]
    assert replies[0]["choices"] == replies[1]["choices"]
    assert replies[0]["usage"]["prompt_tokens"] > (1260 // 28) * (784 // 28)  # the image was counted


# ---------------------------------------------------------------- validator


@pytest.mark.parametrize(
    ("answer", "url", "goal", "success"),
    [
        ("It costs $12.50.", "http://shop.test/product/7", GOAL, True),
        ("It costs 12.50", "http://shop.test/product/7", GOAL, False),
        ("$12.50", "http://shop.test/search", GOAL, False),
        ("anything", "http://x/", "please say hello", True),
        ("anything", "http://x/", "unknown goal", False),
    ],
)
async def test_validator(server: FakeModelServer, answer: str, url: str, goal: str, success: bool) -> None:
    verdict = json.loads(await ask(server, "validator", validator_messages(answer, url, goal)))
    assert verdict["success"] is success
    if success:
        assert verdict["feedback"] == "Looks correct."
    elif goal == GOAL:
        assert verdict["feedback"] == "The answer must include the currency symbol."


async def test_validator_accept_is_case_insensitive() -> None:
    script = with_(tasks=[{"id": "t", "match": "colour", "validator": {"accept": ["Blue"]}}])
    async with FakeModelServer(script) as srv:
        ok = json.loads(await ask(srv, "validator", validator_messages("BLUE", "u", "the colour")))
        bad = json.loads(await ask(srv, "validator", validator_messages("red", "u", "the colour")))
    assert ok["success"] is True and bad == {"success": False, "feedback": "The answer is not correct."}


# ---------------------------------------------------------------- localizer


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("Hcompany/Holo1-7B", "Click(320, 60)"),
        ("Hcompany/Holo1.5-7B", {"action": "click_absolute", "x": 320, "y": 60}),
        ("holo1_5-local", {"action": "click_absolute", "x": 320, "y": 60}),
        ("Hcompany/Holo2-4B", {"x": 500, "y": 150}),
        ("some-vlm", {"action": "click_absolute", "x": 320, "y": 60}),
    ],
)
async def test_localizer_profiles(server: FakeModelServer, model: str, expected: Any) -> None:
    content = await ask(server, "localizer", localizer_messages("the search box", png_url(640, 400)), model)
    assert (content if isinstance(expected, str) else json.loads(content)) == expected


async def test_localizer_default_profile_scale_and_keys() -> None:
    async with FakeModelServer(with_(localizer_profile="holo1")) as srv:
        jpeg = png_url(960, 540, "JPEG")  # scale = max(960/1280, 540/800) = 0.75
        assert await ask(srv, "localizer", localizer_messages("SEARCH BOX", jpeg)) == "Click(480, 90)"
        # Longest key wins ("first result" over "result"); task elements are visible to the localizer.
        assert await ask(srv, "localizer", localizer_messages("the first result", jpeg)) == "Click(225, 188)"
        off = await ask(srv, "localizer", localizer_messages("the checkout button", jpeg))
        assert off == "Click(1010, 270)"  # unknown element: off the image
        assert srv.requests[-1].task is None and srv.requests[-1].image_sizes == [[960, 540]]


# ---------------------------------------------------------------- routing and misc endpoints


@pytest.mark.parametrize(
    ("schema_name", "role"),
    [("policy_reply", "policy"), ("validator_verdict", "validator"), (None, "localizer")],
)
async def test_role_inferred_on_plain_v1(server: FakeModelServer, schema_name: str | None, role: str) -> None:
    extra: dict[str, Any] = {}
    if schema_name:
        extra["response_format"] = {"type": "json_schema", "json_schema": {"name": schema_name, "schema": {}}}
    async with client(server, None) as c:
        await c.chat.completions.create(model="m", messages=validator_messages("a", "u"), **extra)
    assert server.requests[-1].role == role and server.requests[-1].path == "/v1/chat/completions"


async def test_models_list() -> None:
    async with FakeModelServer(with_(models={"policy": "Qwen/Qwen3-VL-8B"})) as srv:
        async with client(srv, None) as c:
            ids = [m.id async for m in c.models.list()]
        async with client(srv, "policy") as c:
            policy_ids = [m.id async for m in c.models.list()]
    assert ids == ["Qwen/Qwen3-VL-8B", "fake-localizer-holo1.5", "fake-validator"]
    assert policy_ids == ["Qwen/Qwen3-VL-8B"]


async def test_errors_404_and_400(server: FakeModelServer) -> None:
    status, body = await asyncio.to_thread(raw_http, "GET", server.url + "/nope")
    assert status == 404 and set(body["error"]) == {"message", "type", "code"}
    status, body = await asyncio.to_thread(raw_http, "POST", server.url + "/planner/v1/chat/completions", b"{}")
    assert status == 404
    status, body = await asyncio.to_thread(raw_http, "POST", server.base_url("policy") + "/chat/completions", b"{x")
    assert status == 400 and "JSON" in body["error"]["message"]


def keep_alive_roundtrips(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    body = json.dumps({"model": "m", "messages": validator_messages("$12.50", "http://s/product/1")})
    for chunked in (False, True):
        if chunked:
            conn.request("POST", "/validator/v1/chat/completions", iter([body.encode()]), encode_chunked=True)
        else:
            conn.request("POST", "/validator/v1/chat/completions", body)
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Connection") == "keep-alive"
        content = json.loads(resp.read())["choices"][0]["message"]["content"]
        assert json.loads(content)["success"] is True
    sock = conn.sock
    conn.request("GET", "/_stats")  # same socket: the connection was kept alive
    assert conn.sock is sock and json.loads(conn.getresponse().read())["requests"]["validator"] == 2
    conn.close()


async def test_keep_alive_and_chunked_bodies(server: FakeModelServer) -> None:
    await asyncio.to_thread(keep_alive_roundtrips, server.port)


def http_edges(port: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request("GET", "/_stats/")  # a trailing slash is the same route
    assert conn.getresponse().read() and conn.sock is not None
    conn.request("GET", "/v1/chat/completions")  # a known path with the wrong method: no route either
    resp = conn.getresponse()
    assert resp.status == 404 and resp.getheader("Content-Type") == "application/json"
    assert json.loads(resp.read())["error"]["message"] == "no route for GET /v1/chat/completions"
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    assert resp.getheader("Content-Type") == "text/plain; version=0.0.4"
    assert b'vllm:prompt_tokens_total{model_name="fake"} 0' in resp.read()
    conn.putrequest("POST", "/policy/v1/chat/completions")  # too large: refused before the body is sent
    conn.putheader("Content-Length", str(MAX_BODY + 1))
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 413 and resp.getheader("Connection") == "close"
    assert json.loads(resp.read())["error"]["message"] == "request body too large"
    conn.close()


async def test_http_edges(server: FakeModelServer) -> None:
    await asyncio.to_thread(http_edges, server.port)


async def send_raw(port: int, path: str, messages: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = json.dumps({"model": "m", "messages": messages}).encode()
    writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    return reader, writer


async def read_until_quiet(reader: asyncio.StreamReader, quiet_s: float = 0.3) -> bytes:
    data = b""
    with contextlib.suppress(TimeoutError):
        while chunk := await asyncio.wait_for(reader.read(65536), quiet_s):
            data += chunk
    return data


async def test_stall_holds_half_a_reply_until_the_server_stops() -> None:
    faults = [{"role": "validator", "nth": n, "kind": "stall"} for n in (1, 2)]
    srv = FakeModelServer(with_(faults=faults))
    await srv.start()
    try:
        reader, writer = await send_raw(srv.port, "/validator/v1/chat/completions", validator_messages("a", "u"))
        gone, gone_writer = await send_raw(srv.port, "/validator/v1/chat/completions", validator_messages("a", "u"))
        head, _, body = (await read_until_quiet(reader)).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        length = next(
            int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k.lower() == b"content-length"
        )
        assert len(body) == length - length // 2  # half of it, and then nothing
        assert (await read_until_quiet(gone)).startswith(b"HTTP/1.1 200 ")
        gone_writer.close()  # this client gives up; its stalled reply is still held
    finally:
        start = time.perf_counter()
        await srv.stop()
        elapsed = time.perf_counter() - start
    assert elapsed < 1.0 and srv.fault_counts["stall"] == 2
    assert await asyncio.wait_for(reader.read(), 2) == b""  # the held connection was closed
    writer.close()


async def test_stop_drops_the_requests_in_hand() -> None:
    async with FakeModelServer(with_(latency_s={"policy": 30.0})) as srv:
        reader, writer = await send_raw(srv.port, "/policy/v1/chat/completions", policy_messages("x"))
        for _ in range(500):  # until the server has the request in hand
            if srv.request_counts["policy"]:
                break
            await asyncio.sleep(0.01)
        start = time.perf_counter()
    assert time.perf_counter() - start < 1.0
    assert await asyncio.wait_for(reader.read(), 2) == b""  # closed without a reply
    writer.close()


async def test_reset_stats_and_record_false(server: FakeModelServer) -> None:
    await act(server, policy_text("http://shop.test/", 1))
    status, stats = await asyncio.to_thread(raw_http, "GET", server.url + "/_stats")
    assert status == 200 and stats["requests"] == {"policy": 1, "localizer": 0, "validator": 0}
    assert stats["faults"]["500"] == 0
    # the answer's time, split: before the scripted wait, and how late after it (one of each)
    timings = stats["timings"]
    assert timings["before_wait_s"]["count"] == timings["late_s"]["count"] == 1
    assert 0.0 <= timings["before_wait_s"]["p50"] < 5.0
    assert timings["late_s"]["p90"] > -0.01  # asyncio may wake a tick early
    await asyncio.to_thread(raw_http, "POST", server.url + "/_reset", b"")
    _, stats = await asyncio.to_thread(raw_http, "GET", server.url + "/_stats")
    assert stats["timings"]["late_s"] == {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0}
    assert server.requests == [] and server.request_counts["policy"] == 0
    async with FakeModelServer(SCRIPT, record=False) as quiet:
        await act(quiet, policy_text("http://shop.test/", 1))
        assert quiet.requests == [] and quiet.request_counts["policy"] == 1


def test_timings_are_summarized_over_the_latest_answers_only() -> None:
    assert quantiles([]) == {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0}
    assert quantiles(float(x) for x in range(10, 0, -1)) == {"count": 10, "mean": 5.5, "p50": 6.0, "p90": 10.0}
    server = FakeModelServer(SCRIPT)
    late = server.timings["late_s"]
    late.extend([9.0] * TIMINGS_KEPT)
    late.append(1.0)  # the oldest answer's figure drops out: the server's memory stays bounded
    assert len(late) == TIMINGS_KEPT and quantiles(late)["count"] == TIMINGS_KEPT


async def test_latency_per_role_and_concurrency() -> None:
    # Order, not wall-clock time: while policy replies sleep out their latency, a validator request
    # is answered, and every concurrent policy request has already arrived before the first reply.
    async with (
        FakeModelServer(with_(latency_s={"policy": 3.0})) as srv,
        client(srv, "policy") as pc,
        client(srv, "validator") as vc,
    ):
        msgs = policy_messages(policy_text("http://shop.test/", 1))
        policy = [asyncio.ensure_future(pc.chat.completions.create(model="m", messages=msgs)) for _ in range(50)]
        await vc.chat.completions.create(model="m", messages=validator_messages("a", "u"))
        assert not any(t.done() for t in policy)  # the validator has no latency of its own
        done, _ = await asyncio.wait(policy, return_when=asyncio.FIRST_COMPLETED)
        assert srv.request_counts["policy"] == 50  # all were in flight at once: served concurrently
        replies = await asyncio.gather(*policy)
    assert len(replies) == 50 and done


def test_start_in_thread_with_sync_client() -> None:
    srv = FakeModelServer(SCRIPT)
    srv.start_in_thread()
    try:
        with openai.OpenAI(base_url=srv.base_url("validator"), api_key="x", max_retries=0) as c:
            r = c.chat.completions.create(model="m", messages=validator_messages("$12.50", "http://s/product/"))
        assert json.loads(r.choices[0].message.content or "")["success"] is True
    finally:
        srv.stop_thread()
    assert len(srv.requests) == 1


# ---------------------------------------------------------------- faults


async def test_fault_500_on_nth_request() -> None:
    async with FakeModelServer(with_(faults=[{"role": "policy", "nth": 2, "kind": "500"}])) as srv:
        text = policy_text("http://shop.test/", 1)
        await act(srv, text)
        with pytest.raises(openai.InternalServerError) as err:
            await act(srv, text)
        assert err.value.status_code == 500 and err.value.code == "internal_error"
        await act(srv, text)
        await ask(srv, "validator", validator_messages("a", "u"))  # other roles count separately
    assert [r.fault for r in srv.requests] == [None, "500", None, None]
    assert srv.fault_counts["500"] == 1


async def test_fault_429_retry_after_header() -> None:
    script = with_(faults=[{"role": "validator", "nth": 1, "kind": "429"}], retry_after_s=1.5)
    async with FakeModelServer(script) as srv:
        with pytest.raises(openai.RateLimitError) as err:
            await ask(srv, "validator", validator_messages("a", "u"))
    assert err.value.response.headers["retry-after"] == "1.5"


async def test_client_retries_through_faults() -> None:
    faults = [{"role": "policy", "nth": 1, "kind": "500"}, {"role": "policy", "nth": 2, "kind": "429"}]
    async with (
        FakeModelServer(with_(faults=faults, retry_after_s=0.05)) as srv,
        client(srv, max_retries=2) as c,
    ):
        r = await c.chat.completions.create(model="m", messages=policy_messages(policy_text("http://s/", 1)))
    assert json.loads(r.choices[0].message.content or "")["action"]["action"] == "write_element"
    assert [x.fault for x in srv.requests] == ["500", "429", None]


@pytest.mark.parametrize(
    ("role", "wrong"), [("policy", {"note": "x"}), ("validator", {"ok": 1}), ("localizer", {"foo": 1})]
)
async def test_fault_malformed_and_schema(role: str, wrong: dict[str, Any]) -> None:
    faults = [{"role": role, "nth": 1, "kind": "malformed"}, {"role": role, "nth": 2, "kind": "schema"}]
    msgs = {
        "policy": policy_messages(policy_text("http://shop.test/", 1)),
        "validator": validator_messages("$12.50", "http://s/product/"),
        "localizer": localizer_messages("search box", png_url(640, 400)),
    }[role]
    async with FakeModelServer(with_(faults=faults)) as srv:
        bad = await ask(srv, role, msgs)
        with pytest.raises(json.JSONDecodeError):
            json.loads(bad)
        assert "Click(" not in bad
        assert json.loads(await ask(srv, role, msgs)) == wrong
    assert srv.fault_counts["malformed"] == 1 and srv.fault_counts["schema"] == 1


async def test_repair_after_malformed_uses_first_user_message() -> None:
    async with FakeModelServer(with_(faults=[{"role": "policy", "nth": 1, "kind": "malformed"}])) as srv:
        msgs = policy_messages(policy_text("http://shop.test/search", 2))
        bad = await ask(srv, "policy", msgs)
        repair = [
            *msgs,
            {"role": "assistant", "content": bad},
            {"role": "user", "content": "Your previous reply could not be used: not valid JSON. Step: 1. Reply again."},
        ]
        fixed = json.loads(await ask(srv, "policy", repair))
    assert fixed["action"]["action"] == "click_element"
    assert srv.requests[-1].messages_count == 4 and srv.requests[-1].step == 2


async def test_an_append_only_conversation_is_answered_from_its_last_turn() -> None:
    async with FakeModelServer(with_(faults=[{"role": "policy", "nth": 2, "kind": "malformed"}])) as srv:
        msgs = policy_messages(policy_text("http://shop.test/", 1))
        first = await ask(srv, "policy", msgs)
        turn = {"role": "user", "content": "Step: 2 of 10\nCurrent URL: http://shop.test/search\nThe screenshot."}
        grown = [*msgs, {"role": "assistant", "content": first}, turn]
        second = await ask(srv, "policy", grown)  # the 2nd request: not a repair, so it takes the fault
    assert json.loads(first)["action"]["action"] == "write_element"
    assert second == "Sure! I think the answer is {broken"
    assert [r.step for r in srv.requests] == [1, 2] and srv.requests[1].turn.startswith("Step: 2 of 10")


@pytest.mark.parametrize("fault_repairs", [True, False])
async def test_drawn_reply_faults_spare_repairs_when_asked(fault_repairs: bool) -> None:
    script = with_(fault_rates={"malformed": 1.0, "500": 0.0}, fault_repairs=fault_repairs)
    async with FakeModelServer(script) as srv:
        msgs = policy_messages(policy_text("http://shop.test/search", 2))
        bad = await ask(srv, "policy", msgs)
        again_text = "Your previous reply could not be used: not JSON. Reply again."
        repair = [*msgs, {"role": "assistant", "content": bad}, {"role": "user", "content": again_text}]
        again = await ask(srv, "policy", repair)
    assert bad == "Sure! I think the answer is {broken"
    if fault_repairs:
        assert again == bad and srv.fault_counts["malformed"] == 2
    else:
        assert json.loads(again)["action"]["action"] == "click_element"
        assert srv.fault_counts["malformed"] == 1 and [r.fault for r in srv.requests] == ["malformed", None]


async def test_fault_slow_times_out_client() -> None:
    faults = [{"role": "policy", "nth": 1, "kind": "slow"}]
    async with FakeModelServer(with_(faults=faults, slow_s=2.0)) as srv:
        async with client(srv, timeout=0.3) as c:
            with pytest.raises(openai.APITimeoutError):  # the client gave up before the 2 s reply
                msgs = policy_messages(policy_text("http://shop.test/", 1))
                await c.chat.completions.create(model="m", messages=msgs)
        await act(srv, policy_text("http://shop.test/", 1))  # the next one is normal
    assert srv.fault_counts["slow"] == 1


async def test_fault_offtarget_only_for_localizer() -> None:
    faults = [
        {"role": "localizer", "nth": 1, "kind": "offtarget"},
        {"role": "policy", "nth": 1, "kind": "offtarget"},
    ]
    async with FakeModelServer(with_(faults=faults)) as srv:
        point = json.loads(await ask(srv, "localizer", localizer_messages("search box", png_url(640, 400))))
        assert point["x"] > 640 or point["y"] > 400 or point["x"] < 0 or point["y"] < 0
        reply = await act(srv, policy_text("http://shop.test/", 1))
    assert reply["action"]["action"] == "write_element"
    assert [r.fault for r in srv.requests] == ["offtarget", None] and srv.fault_counts["offtarget"] == 1


async def test_fault_disconnect() -> None:
    async with FakeModelServer(with_(faults=[{"role": "validator", "nth": 1, "kind": "disconnect"}])) as srv:
        with pytest.raises(openai.APIConnectionError):
            await ask(srv, "validator", validator_messages("a", "u"))
        verdict = json.loads(await ask(srv, "validator", validator_messages("$12.50", "http://s/product/")))
    assert verdict["success"] is True and srv.fault_counts["disconnect"] == 1


async def test_fault_rates_are_seeded() -> None:
    async def pattern(c: AsyncOpenAI) -> list[bool]:
        out = []
        for _ in range(20):
            try:
                await c.chat.completions.create(model="m", messages=validator_messages("a", "u"))
                out.append(False)
            except openai.InternalServerError:
                out.append(True)
        return out

    async with FakeModelServer(with_(fault_rates={"500": 0.5}, seed=7)) as srv, client(srv, "validator") as c:
        first = await pattern(c)
        srv.reset()
        assert await pattern(c) == first
    assert 0 < sum(first) < 20 and srv.fault_counts["500"] == sum(first)
    async with FakeModelServer(with_(fault_rates={"malformed": 1.0})) as srv:
        assert await ask(srv, "policy", policy_messages("x")) == "Sure! I think the answer is {broken"


async def test_even_fault_schedule_gives_every_run_of_requests_its_share() -> None:
    rates: dict[str, float] = {"500": 0.1, "429": 0.05, "malformed": 0.05, "offtarget": 0.02}
    runs: dict[int, list[str | None]] = {}
    for seed in (0, 1):
        async with FakeModelServer(with_(fault_rates=rates, fault_schedule="even", seed=seed)) as srv:
            async with client(srv, "validator") as c:
                for _ in range(200):
                    with contextlib.suppress(openai.APIStatusError):
                        await c.chat.completions.create(model="m", messages=validator_messages("a", "u"))
            runs[seed] = [r.fault for r in srv.requests]
        for kind in ("500", "429", "malformed"):
            for n in range(1, 201):
                assert abs(runs[seed][:n].count(kind) - n * rates[kind]) < 2, (seed, kind, n)
        assert "offtarget" not in runs[seed]  # owed, but only a localizer request can take it
    assert runs[0] != runs[1]  # the seed sets each kind's phase


# ---------------------------------------------------------------- script loading


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "invalid JSON at line 1"),
        ("[1, 2]", "top level must be a JSON object"),
        (json.dumps(with_(latency=1)), "latency: Extra inputs are not permitted"),
        (
            json.dumps({"tasks": [{"id": "a", "match": "m", "policy": [{"when": {"stepp": 1}, "action": {}}]}]}),
            "tasks.0.policy.0.when.stepp",
        ),
        (json.dumps({"faults": [{"role": "policy", "nth": 1, "kind": "timeout"}]}), "faults.0.kind"),
        (
            json.dumps({"tasks": [{"id": "a", "match": "x"}, {"id": "a", "match": "y"}]}),
            "duplicate task id 'a'",
        ),
        (json.dumps({"elements": {"box": [1]}}), "elements.box"),
    ],
)
def test_load_script_errors(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=r"bad\.json") as err:
        load_script(path)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_load_script_sources(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"missing\.json: file not found"):
        load_script(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="<dict>: seed"):
        load_script({"seed": "abc"})
    path = tmp_path / "ok.json"
    path.write_text(json.dumps(SCRIPT))
    script = load_script(str(path))
    assert script.tasks[0].elements["first result"] == (300, 250)
    assert load_script(script) is script and script.latency("policy") == 0.0


# ---------------------------------------------------------------- CLI entry point


async def test_cli_subprocess(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webagent.testing.server", "--script", str(path), stdout=subprocess.PIPE
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
        assert line.startswith(READY_PREFIX + "http://127.0.0.1:")
        url = line.removeprefix(READY_PREFIX).strip()
        async with client(url) as c:
            msgs = policy_messages(policy_text("http://shop.test/search", 2))
            r = await c.chat.completions.create(model="m", messages=msgs)
        assert json.loads(r.choices[0].message.content or "")["action"]["action"] == "click_element"
        os.kill(proc.pid, signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_cli_bad_script(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"tasks": 3}')
    proc = subprocess.run(
        [sys.executable, "-m", "webagent.testing.server", "--script", str(path)],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "broken.json: tasks" in proc.stderr


def test_only_a_policy_reply_s_schema_or_tools_ask_for_a_policy_reply() -> None:
    from webagent.roles.localizer import LOCALIZER_PROFILES
    from webagent.roles.policy import contract_for
    from webagent.testing.contracts import asked

    for profile in LOCALIZER_PROFILES.values():  # a localizer's click schema is not a policy reply's
        assert asked(profile.output_fields or {}) is None
    for family in (None, "holo1.5", "holo3.1"):
        for grounded in (False, True):
            how = asked(contract_for(family, "json", grounded).request_fields)
            assert how is not None and how.grounded == grounded
    how = asked(contract_for("holo4", "tools", True).request_fields)
    assert how is not None and (how.output, how.grounded) == ("tools", True)
