"""HTTP under the model client: the SDK over a scripted httpx transport, and over real sockets."""

from __future__ import annotations

import asyncio
import email.utils
import http.client
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import pytest

from webagent.config import RoleConfig
from webagent.errors import ModelError, ModelUnavailableError
from webagent.model import replies as replies_module
from webagent.model.client import ModelClient
from webagent.model.endpoints import EndpointPool
from webagent.model.replies import parse_retry_after, retry_after
from webagent.records import RoleUsage

from ..conftest import ServerFactory
from .test_client import MESSAGES, validator_script

OK = {
    "choices": [{"message": {"role": "assistant", "content": '{"success": true, "feedback": ""}'}}],
    "usage": {"prompt_tokens": 11, "completion_tokens": 3},
}
OK_BODY = json.dumps(OK).encode()


class Scripted:
    """An ``httpx2.MockTransport`` handler: answers each request with the next reply (or raises it)."""

    def __init__(self, *replies: httpx2.Response | Exception) -> None:
        self.replies = list(replies)
        self.sent: list[httpx2.Request] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append(request)
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def scripted_client(script: Scripted, **config: Any) -> ModelClient:
    role = RoleConfig(base_url="http://gpu-a:8000/v1/", model="holo", api_key="sk-test", **config)
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(script))
    return ModelClient("validator", role, EndpointPool("validator", role, http))


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The backoff sleeps, recorded instead of slept."""
    slept: list[float] = []

    async def no_sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", no_sleep)
    return slept


async def test_the_request_on_the_wire() -> None:
    script = Scripted(httpx2.Response(200, content=OK_BODY))
    client = scripted_client(script, timeout_s=7.5)
    usage = RoleUsage()
    completion = await client.complete(
        MESSAGES, response_format={"type": "json_object"}, extra_body={"top_k": 5}, usage=usage
    )
    request = script.sent[0]
    assert request.method == "POST" and str(request.url) == "http://gpu-a:8000/v1/chat/completions"
    headers = request.headers
    assert headers["Authorization"] == "Bearer sk-test" and headers["Content-Type"] == "application/json"
    assert headers["User-Agent"].startswith("webagent/")
    assert not [name for name in headers if name.lower().startswith("x-stainless")]
    assert request.extensions["timeout"]["read"] == 7.5
    sent = json.loads(request.content)
    assert sent["model"] == "holo" and sent["messages"] == MESSAGES and sent["max_tokens"] == 1024
    assert sent["response_format"] == {"type": "json_object"} and sent["top_k"] == 5  # extra_body merged
    assert completion.text.startswith('{"success"') and (usage.prompt_tokens, usage.completion_tokens) == (11, 3)


async def test_a_load_balancers_sticky_cookie_is_sent_back() -> None:
    """The request is the HTTP client's: what a server set in a cookie (a sticky session behind a load
    balancer) comes back with the next request, as the SDK's own requests do."""
    sticky = httpx2.Response(200, content=OK_BODY, headers={"Set-Cookie": "lb=gpu-a-3; Path=/"})
    script = Scripted(sticky, httpx2.Response(200, content=OK_BODY))
    client = scripted_client(script)
    for _ in range(2):
        await client.complete(MESSAGES, usage=RoleUsage())
    assert "cookie" not in script.sent[0].headers and script.sent[1].headers["Cookie"] == "lb=gpu-a-3"
    assert script.sent[1].headers["Authorization"] == "Bearer sk-test"


async def test_api_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    script = Scripted(httpx2.Response(200, content=OK_BODY), httpx2.Response(200, content=OK_BODY))
    role = RoleConfig(base_url="http://gpu-a:8000/v1", model="holo")
    http = httpx2.AsyncClient(transport=httpx2.MockTransport(script))
    await ModelClient("validator", role, EndpointPool("validator", role, http)).complete(MESSAGES, usage=RoleUsage())
    monkeypatch.delenv("OPENAI_API_KEY")
    await ModelClient("validator", role, EndpointPool("validator", role, http)).complete(MESSAGES, usage=RoleUsage())
    assert [r.headers["Authorization"] for r in script.sent] == ["Bearer sk-env", "Bearer EMPTY"]


async def test_extra_headers_from_the_sdks_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Team: agents\nX-Trace: on")
    script = Scripted(httpx2.Response(200, content=OK_BODY))
    await scripted_client(script).complete(MESSAGES, usage=RoleUsage())
    headers = script.sent[0].headers
    assert headers["X-Team"] == "agents" and headers["X-Trace"] == "on"
    assert headers["Authorization"] == "Bearer sk-test" and headers["User-Agent"].startswith("webagent/")


async def test_custom_headers_override_as_the_sdk_lets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gateway's token in ``OPENAI_CUSTOM_HEADERS`` replaces the API key's, a name in any case
    replaces the SDK's own (never sent twice), and the organisation and project go as the SDK sends them."""
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "authorization: Bearer gateway-token\nuser-agent: custom-ua")
    monkeypatch.setenv("OPENAI_ORG_ID", "org-1")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-1")
    script = Scripted(httpx2.Response(200, content=OK_BODY))
    await scripted_client(script).complete(MESSAGES, usage=RoleUsage())
    headers = script.sent[0].headers
    assert headers.get_list("Authorization") == ["Bearer gateway-token"]
    assert headers.get_list("User-Agent") == ["custom-ua"]
    assert headers["OpenAI-Organization"] == "org-1" and headers["OpenAI-Project"] == "proj-1"
    assert headers.get_list("Content-Type") == ["application/json"]
    assert not [name for name in headers if name.lower().startswith("x-stainless")]


async def test_transient_failures_are_retried_with_the_servers_hint(waits: list[float]) -> None:
    date = email.utils.formatdate(time.time() + 4, usegmt=True)
    script = Scripted(
        httpx2.Response(429, json={"error": {"message": "slow down"}}, headers={"Retry-After": "2"}),
        httpx2.Response(503, content=b"overloaded", headers={"Retry-After": date}),
        httpx2.ConnectError("connection refused (gpu-a:8000)"),
        httpx2.ReadTimeout("timed out"),
        httpx2.Response(200, content=OK_BODY),
    )
    usage = RoleUsage()
    await scripted_client(script, max_retries=4).complete(MESSAGES, usage=usage)
    assert usage.retries == 4 and usage.calls == 1 and usage.failures == 0 and len(script.sent) == 5
    assert waits[0] == 2.0 and 2.0 <= waits[1] <= 4.0  # Retry-After as seconds, then as an HTTP date
    assert waits[2:] == [2.0, 4.0]  # no hint: exponential backoff (attempts 3 and 4)


async def test_retry_after_ms_and_the_cap(waits: list[float]) -> None:
    script = Scripted(
        httpx2.Response(429, headers={"retry-after-ms": "250", "Retry-After": "1"}),
        httpx2.Response(503, headers={"Retry-After": "3600"}),
        httpx2.Response(408),
        httpx2.Response(200, content=OK_BODY),
    )
    await scripted_client(script, max_retries=3).complete(MESSAGES, usage=RoleUsage())
    assert waits == [0.25, replies_module.RETRY_MAX_WAIT_S, 2.0]


async def test_error_details_come_from_the_reply_body() -> None:
    script = Scripted(httpx2.Response(400, json={"error": {"message": "max_tokens is too large", "code": 400}}))
    with pytest.raises(ModelError, match=r"refused the request \(HTTP 400: max_tokens is too large\)") as info:
        await scripted_client(script).complete(MESSAGES, usage=RoleUsage())
    assert not isinstance(info.value, ModelUnavailableError) and len(script.sent) == 1
    assert "check the request settings" in str(info.value)

    script = Scripted(httpx2.Response(401, json={"detail": "bad key"}))
    with pytest.raises(ModelError, match=r"\(HTTP 401: bad key\); check the API key"):
        await scripted_client(script).complete(MESSAGES, usage=RoleUsage())

    script = Scripted(*[httpx2.Response(502, content=b"<html>Bad Gateway</html>")] * 2)
    with pytest.raises(ModelUnavailableError, match=r"kept failing \(HTTP 502: <html>Bad Gateway</html>\)"):
        await scripted_client(script, max_retries=1).complete(MESSAGES, usage=RoleUsage())

    script = Scripted(httpx2.Response(500))
    with pytest.raises(ModelUnavailableError, match=r"HTTP 500: no details in the reply"):
        await scripted_client(script, max_retries=0).complete(MESSAGES, usage=RoleUsage())


async def test_no_reply_is_a_one_line_error_naming_the_reason(waits: list[float]) -> None:
    script = Scripted(*[httpx2.ConnectError("connection refused (gpu-a:8000)")] * 2)
    with pytest.raises(ModelUnavailableError) as info:
        await scripted_client(script, max_retries=1).complete(MESSAGES, usage=RoleUsage())
    message = str(info.value)
    assert "\n" not in message
    assert "could not be reached (connection refused (gpu-a:8000)) after 2 attempts" in message

    script = Scripted(httpx2.ReadTimeout("no reply"))
    with pytest.raises(ModelUnavailableError, match="timed out after 1 attempts"):
        await scripted_client(script, max_retries=0).complete(MESSAGES, usage=RoleUsage())


async def test_a_reply_that_is_not_a_completion_is_text_for_the_parser() -> None:
    """A 200 whose body is not a chat.completion: its text goes to the parser (and the repair request)."""
    script = Scripted(httpx2.Response(200, content=b"<html>proxy login</html>"), httpx2.Response(200, json={"x": 1}))
    client = scripted_client(script)
    usage = RoleUsage()
    assert (await client.complete(MESSAGES, usage=usage)).text == "<html>proxy login</html>"
    assert (await client.complete(MESSAGES, usage=usage)).text == '{"x":1}'
    assert usage.calls == 2 and usage.prompt_tokens == 0


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("3") == 3.0 and parse_retry_after(" 0.5 ") == 0.5 and parse_retry_after("-4") == 0.0
    assert parse_retry_after(email.utils.formatdate(now + 10, usegmt=True), now=now) == 10.0
    assert parse_retry_after(email.utils.formatdate(now - 10, usegmt=True), now=now) == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None and parse_retry_after("") is None
    assert retry_after(httpx2.Headers({"Retry-After-Ms": "1500", "Retry-After": "9"})) == 1.5
    assert retry_after(httpx2.Headers({"retry-after-ms": "x", "retry-after": "9"})) == 9.0
    assert retry_after(httpx2.Headers({})) is None


# ---------------------------------------------------------------- real sockets


def free_port() -> int:
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def socket_client(base_url: str, **config: Any) -> ModelClient:
    return ModelClient("validator", RoleConfig(base_url=base_url, model="m", **config))


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]


@asynccontextmanager
async def raw_server(handle: Handler) -> AsyncIterator[str]:
    """An asyncio socket server; yields its base URL."""
    writers: list[asyncio.StreamWriter] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            await handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    listener = await asyncio.start_server(tracked, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/v1"
    finally:
        listener.close()
        for writer in writers:
            writer.close()
        await listener.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    await reader.readexactly(length)
    return head


def raw_reply(body: bytes = OK_BODY, status: str = "200 OK", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


async def test_connection_refused_and_unknown_host() -> None:
    port = free_port()
    c = socket_client(f"http://127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(
        ModelUnavailableError, match=rf"could not be reached \(connection refused \(127.0.0.1:{port}\)\)"
    ):
        await c.complete(MESSAGES, usage=RoleUsage())
    await c.aclose()
    c = socket_client("http://no-such-host.invalid/v1", max_retries=0)
    with pytest.raises(ModelUnavailableError, match="cannot resolve the host"):
        await c.complete(MESSAGES, usage=RoleUsage())
    await c.aclose()


async def test_a_server_that_drops_the_request_is_not_a_timeout(model_server: ServerFactory) -> None:
    faults = [{"role": "validator", "nth": 1, "kind": "disconnect"}]
    async with model_server(validator_script(faults=faults)) as server:
        c = socket_client(server.base_url("validator"), max_retries=0)
        with pytest.raises(ModelUnavailableError) as info:
            await c.complete(MESSAGES, usage=RoleUsage())
        usage = RoleUsage()
        await c.complete(MESSAGES, usage=usage)  # the next request gets a fresh connection
        await c.aclose()
    assert "could not be reached (the server closed the connection without a reply)" in str(info.value)
    assert usage.calls == 1 and usage.retries == 0


async def test_a_stalled_reply_times_out(model_server: ServerFactory) -> None:
    faults = [{"role": "validator", "nth": 1, "kind": "stall"}]
    async with model_server(validator_script(faults=faults)) as server:
        c = socket_client(server.base_url("validator"), timeout_s=0.3, max_retries=0)
        with pytest.raises(ModelUnavailableError, match="timed out after 1 attempts"):
            await c.complete(MESSAGES, usage=RoleUsage())
        await c.aclose()


async def test_the_deadline_covers_the_whole_reply() -> None:
    """A server that trickles its reply byte by byte never lets a read time out; the deadline still holds."""

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for byte in raw_reply():
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.05)

    async with raw_server(trickle) as url:
        c = socket_client(url, timeout_s=0.5, max_retries=0)
        start = time.perf_counter()
        with pytest.raises(ModelUnavailableError, match="timed out"):
            await c.complete(MESSAGES, usage=RoleUsage())
        elapsed = time.perf_counter() - start
        await c.aclose()
    assert elapsed < 2.0


@pytest.mark.parametrize(
    "raw",
    [
        b"SSH-2.0-OpenSSH_9.2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",
    ],
)
async def test_malformed_replies_are_one_line_errors(raw: bytes) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(raw)
        await writer.drain()

    async with raw_server(answer) as url:
        c = socket_client(url, max_retries=0)
        with pytest.raises(ModelUnavailableError, match="could not be reached") as info:
            await c.complete(MESSAGES, usage=RoleUsage())
        await c.aclose()
    assert "\n" not in str(info.value)


async def test_a_pooled_connection_the_server_closed_costs_no_retry() -> None:
    connections = 0

    async def one_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(raw_reply())  # keep-alive announced, then the connection closed
        await writer.drain()

    async with raw_server(one_per_connection) as url:
        c = socket_client(url)
        usage = RoleUsage()
        await c.complete(MESSAGES, usage=usage)
        await asyncio.sleep(0.05)  # the close arrives while the connection idles in the pool
        await c.complete(MESSAGES, usage=usage)
        await c.aclose()
    assert usage.calls == 2 and usage.retries == 0 and connections == 2


async def test_bad_api_keys_are_one_line_errors_not_sent() -> None:
    seen: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(raw_reply())
        await writer.drain()

    async with raw_server(record) as url:
        for key in ("sk-abc\n", "sk-a\r\nX-Injected: 1", "sk-é"):
            c = socket_client(url, api_key=key, max_retries=0)
            with pytest.raises(ModelError, match="API key has a line break or a non-ASCII character") as info:
                await c.complete(MESSAGES, usage=RoleUsage())
            await c.aclose()
            assert "\n" not in str(info.value) and key not in str(info.value)
    assert seen == []


# The first loop's idle connection cannot be closed once asyncio.run has closed that loop.
@pytest.mark.filterwarnings("ignore:Unclosed:ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_one_pool_across_event_loops(model_server: ServerFactory) -> None:
    """One pool used from two asyncio.run calls (an Agent run twice without aclose) keeps working."""
    role = RoleConfig(base_url="http://127.0.0.1:1/v1", model="m")
    pool = EndpointPool("validator", role)

    async def once() -> int:
        async with model_server(validator_script()) as server:
            pool.endpoints[0].base_url = server.base_url("validator")
            pool.endpoints[0].url = server.base_url("validator") + "/chat/completions"
            pool.endpoints[0].client = None
            usage = RoleUsage()
            await ModelClient("validator", role, pool).complete(MESSAGES, usage=usage)
        return usage.calls

    assert asyncio.run(once()) == 1
    assert asyncio.run(once()) == 1
    asyncio.run(pool.aclose())  # the pooled connection belongs to the closed loop: dropped, no error


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

        with serving(Redirect) as port:
            c = socket_client(f"http://127.0.0.1:{port}/v1")
            usage = RoleUsage()
            completion = await c.complete(MESSAGES, usage=usage)
            await c.aclose()
        assert server.request_counts["validator"] == 1
    assert '"success"' in completion.text and usage.calls == 1


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    front = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    try:
        yield front.server_port
    finally:
        front.shutdown()
        front.server_close()


def forward_proxy(proxied: list[str]) -> type[BaseHTTPRequestHandler]:
    """An HTTP forward proxy for POSTs that records the URL each one asked for (absolute-form)."""

    class ForwardProxy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            proxied.append(self.path)  # absolute-form: the proxy is asked for the whole URL
            body = self.rfile.read(int(self.headers["Content-Length"]))
            target = httpx2.URL(self.path)
            upstream = http.client.HTTPConnection(target.host, target.port, timeout=10)
            upstream.request("POST", target.raw_path.decode(), body, {"Content-Type": "application/json"})
            reply = upstream.getresponse()
            data = reply.read()
            self.send_response(reply.status)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data)
            upstream.close()

        def log_message(self, *args: object) -> None:
            pass

    return ForwardProxy


def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)


async def test_proxies_come_from_the_environment(model_server: ServerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY is used for plain-http endpoints unless NO_PROXY names the host."""
    proxied: list[str] = []
    no_proxies(monkeypatch)
    async with model_server(validator_script()) as server:
        with serving(forward_proxy(proxied)) as port:
            monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
            c = socket_client(server.base_url("validator"))
            await c.complete(MESSAGES, usage=RoleUsage())
            await c.aclose()
            assert proxied == [server.base_url("validator") + "/chat/completions"]

            monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
            c = socket_client(server.base_url("validator"))
            await c.complete(MESSAGES, usage=RoleUsage())
            await c.aclose()
        assert len(proxied) == 1 and server.request_counts["validator"] == 2


async def test_the_environments_proxies_are_read_as_httpx_reads_them(
    model_server: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy written without its scheme is used; NO_PROXY's CIDR ranges and ``*`` in a list keep
    a host off it (what httpx2 does, and urllib does not)."""
    proxied: list[str] = []
    no_proxies(monkeypatch)
    async with model_server(validator_script()) as server:
        with serving(forward_proxy(proxied)) as port:
            monkeypatch.setenv("HTTP_PROXY", f"127.0.0.1:{port}")
            for no_proxy in ("", "127.0.0.0/8", "example.org,*"):
                monkeypatch.setenv("NO_PROXY", no_proxy)
                c = socket_client(server.base_url("validator"))
                await c.complete(MESSAGES, usage=RoleUsage())
                await c.aclose()
        assert proxied == [server.base_url("validator") + "/chat/completions"]  # the first only
        assert server.request_counts["validator"] == 3
