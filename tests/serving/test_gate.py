"""The gate every server of ours sits behind, as ASGI: a WebSocket handshake is checked as an HTTP
request is (refused before it is accepted, with the HTTP status when the server can send one), the
client named by its token or its address; and where tokens come from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webagent.errors import InputError
from webagent.serving.gate import CLIENT_KEY, HTTPGate, client_of
from webagent.serving.tokens import read_tokens, require_token

TOKEN = "t0ken-of-sixteen-chars"
ENV = "WEBAGENT_TEST_AUTH_TOKEN"


class App:
    """The server's app behind the gate: what reached it."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scopes.append(scope)
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.accept"})


async def knock(
    gate: HTTPGate, kind: str, headers: dict[str, str], *, denial: bool = True, path: str = "/ws"
) -> list[Any]:
    """What the gate sends for one request or handshake with ``headers``."""
    scope: dict[str, Any] = {
        "type": kind,
        "path": path,
        "method": "GET",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("10.1.2.3", 40000),
        "extensions": {"websocket.http.response": {}} if denial else {},
    }
    sent: list[Any] = []
    queue = [{"type": "websocket.connect"} if kind == "websocket" else {"type": "http.request", "body": b""}]

    async def receive() -> Any:
        return queue.pop(0) if queue else {"type": "websocket.disconnect"}

    async def send(message: Any) -> None:
        sent.append(message)

    await gate(scope, receive, send)
    return sent


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "evil.example:8000"}, 421),
        ({"Host": "127.0.0.1:8000", "Origin": "http://evil.example"}, 403),
        ({"Host": "127.0.0.1:8000", "Origin": "null"}, 403),
        ({"Host": "127.0.0.1:8000"}, 401),
        ({"Host": "127.0.0.1:8000", "Authorization": "Bearer nope-nope-nope-nope"}, 401),
    ],
)
async def test_a_handshake_is_refused_before_it_is_accepted(headers: dict[str, str], status: int) -> None:
    app = App()
    gate = HTTPGate(app, bind_host="127.0.0.1", tokens=[TOKEN])
    sent = await knock(gate, "websocket", headers)
    assert sent[0]["type"] == "websocket.http.response.start" and sent[0]["status"] == status
    assert not any(m["type"] == "websocket.accept" for m in sent) and app.scopes == []
    # A server without the denial extension: a close before the accept (which it answers 403).
    sent = await knock(gate, "websocket", headers, denial=False)
    assert sent == [{"type": "websocket.close", "code": 1008}] and app.scopes == []
    # The same headers on HTTP: the same status.
    sent = await knock(gate, "http", headers, path="/schema")
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == status


async def test_let_through_the_client_is_its_token_or_its_address() -> None:
    app = App()
    ok = {"Host": "localhost:8000", "Origin": "http://127.0.0.1:5173"}
    one = HTTPGate(app, bind_host="127.0.0.1", tokens=[TOKEN])
    sent = await knock(one, "websocket", {**ok, "Authorization": f"Bearer {TOKEN}"})
    assert sent == [{"type": "websocket.accept"}] and client_of(app.scopes[-1]) == "10.1.2.3"
    several = HTTPGate(app, bind_host="127.0.0.1", tokens=[TOKEN, TOKEN + "-2"])
    await knock(several, "websocket", {**ok, "Authorization": f"Bearer {TOKEN}-2"})
    assert app.scopes[-1][CLIENT_KEY] == "token 2"
    # A public path needs no token; every other one does.
    public = HTTPGate(app, bind_host="127.0.0.1", tokens=[TOKEN], public_paths=["/health"])
    assert (await knock(public, "http", {"Host": "127.0.0.1:8000"}, path="/health")) == []
    sent = await knock(public, "http", {"Host": "127.0.0.1:8000"}, path="/state")
    assert sent[0]["status"] == 401


def test_tokens_come_from_a_flag_a_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert read_tokens(None, None, ENV) == []
    monkeypatch.setenv(ENV, f" {TOKEN} ")
    assert read_tokens(None, None, ENV) == [TOKEN]
    assert read_tokens(TOKEN + "-flag", None, ENV) == [TOKEN + "-flag"]  # a flag wins over the environment
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# clients\n\n{TOKEN}-a\n  {TOKEN}-b  \n{TOKEN}-a\n")
    assert read_tokens(None, str(tokens), ENV) == [f"{TOKEN}-a", f"{TOKEN}-b"]
    for flag, path, words in (
        (TOKEN, str(tokens), "not both"),
        ("short", None, "at least 16 characters"),
        ("with a space inside it", None, "no spaces"),
        (None, str(tmp_path / "missing"), "does not exist"),
    ):
        with pytest.raises(InputError, match=words):
            read_tokens(flag, path, ENV)
    tokens.write_text("# none\n")
    with pytest.raises(InputError, match="holds no token"):
        read_tokens(None, str(tokens), ENV)


@pytest.mark.parametrize(
    ("bound", "refused"), [("127.0.0.1", False), ("::1", False), ("0.0.0.0", True), ("::", True), ("192.168.1.5", True)]
)
def test_beyond_loopback_a_token_is_required(bound: str, refused: bool) -> None:
    def start(tokens: list[str]) -> None:
        require_token(bound, tokens, url="http://x:1", env=ENV, loopback="--host 127.0.0.1")

    start([TOKEN])
    if refused:
        with pytest.raises(InputError, match=f"without authentication: set a token \\({ENV}=..."):
            start([])
    else:
        start([])
