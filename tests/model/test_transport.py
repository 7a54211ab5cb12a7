"""The HTTP seam: a fake transport under the real client, and aiohttp against real sockets."""

from __future__ import annotations

import asyncio
import email.utils
import json
import socket
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from webagent.config import RoleConfig
from webagent.errors import ModelError, ModelUnavailableError
from webagent.model.client import EndpointPool, ModelClient
from webagent.model.http11 import DefaultTransport, PlainHTTPTransport
from webagent.model.transport import (
    AiohttpTransport,
    HTTPReply,
    Transport,
    TransportError,
    parse_retry_after,
    proxy_for,
)
from webagent.records import RoleUsage

from ..conftest import ServerFactory
from .test_client import MESSAGES, validator_script

OK_BODY = json.dumps(
    {
        "choices": [{"message": {"role": "assistant", "content": '{"success": true, "feedback": ""}'}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3},
    }
).encode()


class ScriptedTransport:
    """Answers each post with the next reply (or raises it), recording what was sent."""

    def __init__(self, *replies: HTTPReply | Exception) -> None:
        self.replies = list(replies)
        self.sent: list[tuple[str, bytes, dict[str, str], float]] = []
        self.closed = 0

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> HTTPReply:
        self.sent.append((url, body, dict(headers), timeout_s))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def aclose(self) -> None:
        self.closed += 1


def scripted_client(transport: ScriptedTransport, **config: Any) -> ModelClient:
    role = RoleConfig(base_url="http://gpu-a:8000/v1/", model="holo", api_key="sk-test", **config)
    return ModelClient("validator", role, EndpointPool("validator", role, transport))


async def test_the_request_on_the_wire() -> None:
    transport = ScriptedTransport(HTTPReply(200, OK_BODY))
    client = scripted_client(transport, timeout_s=7.5)
    usage = RoleUsage()
    completion = await client.complete(MESSAGES, usage=usage)
    url, body, headers, timeout_s = transport.sent[0]
    assert url == "http://gpu-a:8000/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test" and headers["Content-Type"] == "application/json"
    assert headers["User-Agent"].startswith("webagent/")
    assert timeout_s == 7.5
    sent = json.loads(body)
    assert sent["model"] == "holo" and sent["messages"] == MESSAGES
    assert completion.text.startswith('{"success"') and (usage.prompt_tokens, usage.completion_tokens) == (11, 3)


async def test_transient_failures_are_retried_with_the_servers_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", no_sleep)
    date = email.utils.formatdate(time.time() + 4, usegmt=True)
    transport = ScriptedTransport(
        HTTPReply(429, b'{"error": {"message": "slow down"}}', parse_retry_after("2")),
        HTTPReply(503, b"overloaded", parse_retry_after(date)),
        TransportError("connection refused (gpu-a:8000)"),
        TransportError("no reply within 60 s", timeout=True),
        HTTPReply(200, OK_BODY),
    )
    usage = RoleUsage()
    await scripted_client(transport, max_retries=4).complete(MESSAGES, usage=usage)
    assert usage.retries == 4 and usage.calls == 1 and usage.failures == 0
    assert waits[0] == 2.0 and 2.0 <= waits[1] <= 4.0  # Retry-After as seconds, then as an HTTP date
    assert waits[2:] == [2.0, 4.0]  # no hint: exponential backoff (attempts 3 and 4)


async def test_error_details_come_from_the_reply_body() -> None:
    transport = ScriptedTransport(HTTPReply(400, b'{"error": {"message": "max_tokens is too large", "code": 400}}'))
    with pytest.raises(ModelError, match=r"refused the request \(HTTP 400: max_tokens is too large\)") as info:
        await scripted_client(transport).complete(MESSAGES, usage=RoleUsage())
    assert not isinstance(info.value, ModelUnavailableError) and len(transport.sent) == 1

    transport = ScriptedTransport(*[HTTPReply(502, b"<html>Bad Gateway</html>")] * 2)
    with pytest.raises(ModelUnavailableError, match=r"kept failing \(HTTP 502: <html>Bad Gateway</html>\)"):
        await scripted_client(transport, max_retries=1).complete(MESSAGES, usage=RoleUsage())


async def test_no_reply_is_a_one_line_error_naming_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_sleep(seconds: float) -> None:
        pass

    monkeypatch.setattr(asyncio, "sleep", no_sleep)
    transport = ScriptedTransport(*[TransportError("connection refused (gpu-a:8000)")] * 2)
    with pytest.raises(ModelUnavailableError) as info:
        await scripted_client(transport, max_retries=1).complete(MESSAGES, usage=RoleUsage())
    message = str(info.value)
    assert "\n" not in message
    assert "could not be reached (connection refused (gpu-a:8000)) after 2 attempts" in message

    transport = ScriptedTransport(TransportError("no reply within 1 s", timeout=True))
    with pytest.raises(ModelUnavailableError, match="timed out after 1 attempts"):
        await scripted_client(transport, max_retries=0).complete(MESSAGES, usage=RoleUsage())


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("3") == 3.0 and parse_retry_after(" 0.5 ") == 0.5 and parse_retry_after("-4") == 0.0
    assert parse_retry_after(email.utils.formatdate(now + 10, usegmt=True), now=now) == 10.0
    assert parse_retry_after(email.utils.formatdate(now - 10, usegmt=True), now=now) == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None and parse_retry_after("") is None


def test_proxies_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1,.internal")
    assert proxy_for("https://api.example.com/v1/chat/completions") == "http://proxy.corp:3128"
    assert proxy_for("https://gpu.internal/v1/chat/completions") is None
    assert proxy_for("http://127.0.0.1:8000/v1/chat/completions") is None
    assert proxy_for("http://plain.example/v1/chat/completions") is None  # no HTTP_PROXY set


@pytest.mark.parametrize("make", [AiohttpTransport, PlainHTTPTransport, DefaultTransport])
async def test_each_transport_against_the_offline_server(
    model_server: ServerFactory, make: Callable[[], Transport]
) -> None:
    transport = make()
    # 50 ms per reply: the 1e-4 s timeout below cannot lose the race to a reply already there
    script = validator_script(fault_rates={"429": 1.0}, retry_after_s=0.25, latency_s=0.05)
    async with model_server(script) as server:
        body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
        url = server.base_url("validator") + "/chat/completions"
        reply = await transport.post(url, body, {"Content-Type": "application/json"}, 5.0)
        assert reply.status == 429 and reply.retry_after_s == 0.25 and b"rate" in reply.body
        with pytest.raises(TransportError) as info:
            await transport.post(url, body, {}, 1e-4)
        assert info.value.timeout
    await transport.aclose()
    await transport.aclose()  # closing twice is fine


async def test_aiohttp_connection_refused() -> None:
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    transport = AiohttpTransport()
    with pytest.raises(TransportError) as info:
        await transport.post(f"http://127.0.0.1:{port}/v1/chat/completions", b"{}", {}, 5.0)
    await transport.aclose()
    assert not info.value.timeout and "refused" in str(info.value) and str(port) in str(info.value)


# The first loop's idle connection cannot be closed once asyncio.run has closed that loop.
@pytest.mark.filterwarnings("ignore:Unclosed connector:ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_aiohttp_follows_the_event_loop(model_server: ServerFactory) -> None:
    """One transport used from two asyncio.run calls (an Agent run twice without aclose) keeps working."""
    transport = AiohttpTransport()

    async def once() -> int:
        async with model_server(validator_script()) as server:
            body = json.dumps({"model": "m", "messages": MESSAGES}).encode()
            reply = await transport.post(server.base_url("validator") + "/chat/completions", body, {}, 5.0)
        return reply.status

    assert asyncio.run(once()) == 200
    assert asyncio.run(once()) == 200
    asyncio.run(transport.aclose())


async def test_a_redirecting_endpoint_is_followed(model_server: ServerFactory) -> None:
    """A proxy in front of the server answering 308 (e.g. to add a path prefix) does not break calls."""
    async with model_server(validator_script()) as server:
        target = server.base_url("validator") + "/chat/completions"

        class Redirect(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(308)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        front = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
        threading.Thread(target=front.serve_forever, daemon=True).start()
        try:
            role = RoleConfig(base_url=f"http://127.0.0.1:{front.server_port}/v1", model="m")
            c = ModelClient("validator", role)
            usage = RoleUsage()
            completion = await c.complete(MESSAGES, usage=usage)
            await c.aclose()
        finally:
            front.shutdown()
            front.server_close()
        assert server.request_counts["validator"] == 1
    assert '"success"' in completion.text and usage.calls == 1
