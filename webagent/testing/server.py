"""Offline OpenAI-compatible model server that answers from a script (stdlib asyncio HTTP/1.1)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import math
import random
import re
import signal
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from pydantic import BaseModel

from webagent.testing.images import image_size, shrink_images
from webagent.testing.script import (
    FAULT_KINDS,
    REPLY_FAULTS,
    ROLES,
    FaultKind,
    Role,
    Script,
    candidate_answer,
    format_click,
    load_script,
    localizer_profile,
    parse_policy_prompt,
)

READY_PREFIX = "webagent fake model server listening on "
NO_ACTION = json.dumps(
    {
        "note": "",
        "thought": "no scripted rule matched",
        "action": {"action": "answer", "content": "NO SCRIPTED ACTION"},
    }
)
MALFORMED = "Sure! I think the answer is {broken"
WRONG_SHAPE: dict[Role, str] = {
    "policy": '{"note": "x"}',
    "validator": '{"ok": 1}',
    "localizer": '{"foo": 1}',
}
MAX_BODY = 64 * 1024 * 1024
_CHAT_RE = re.compile(r"(?:/(?P<role>policy|localizer|validator))?/v1/chat/completions")
_MODELS_RE = re.compile(r"(?:/(?P<role>policy|localizer|validator))?/v1/models")


class RecordedRequest(BaseModel):
    """One logged chat-completion request (never holds image bytes)."""

    role: Role
    path: str
    model: str
    task: str | None = None
    step: int | None = None
    fault: FaultKind | None = None
    text: str = ""
    system: str = ""
    n_images: int = 0
    image_sizes: list[list[int]] = []
    messages_count: int = 0
    extra: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    """The messages as received, each image URL replaced by ``sha256:<digest of the image bytes>``."""


# ---------------------------------------------------------------- message helpers


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [p for p in content if isinstance(p, dict)] if isinstance(content, list) else []


def _texts(content: Any) -> list[str]:
    return [str(p.get("text", "")) for p in _parts(content) if p.get("type") == "text"]


def _image_urls(content: Any) -> list[str]:
    urls: list[str] = []
    for p in _parts(content):
        if p.get("type") == "image_url":
            img = p.get("image_url")
            urls.append(str(img.get("url", "")) if isinstance(img, dict) else str(img or ""))
    return urls


def _digest_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = [_digest_part(p) for p in content]
        out.append({**message, "content": content})
    return out


def _digest_part(part: Any) -> Any:
    if not (isinstance(part, dict) and part.get("type") == "image_url" and isinstance(part.get("image_url"), dict)):
        return part
    url = str(part["image_url"].get("url", ""))
    payload = url.partition(",")[2] if url.startswith("data:") else ""
    try:
        digest = "sha256:" + hashlib.sha256(base64.b64decode(payload, validate=True)).hexdigest()
    except ValueError:
        digest = url
    return {**part, "image_url": {**part["image_url"], "url": digest}}


def _first_user(messages: list[dict[str, Any]]) -> Any:
    return next((m.get("content") for m in messages if m.get("role") == "user"), "")


def estimate_usage(messages: list[dict[str, Any]], image_sizes: list[list[int]], completion: str) -> dict[str, int]:
    """OpenAI-style usage: ~4 chars per token plus one token per 28x28-pixel image patch."""
    chars = sum(len(t) for m in messages for t in _texts(m.get("content")))
    images = sum((w // 28) * (h // 28) for w, h in image_sizes)
    prompt, done = math.ceil(chars / 4) + images, math.ceil(len(completion) / 4)
    return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}


def _infer_role(body: dict[str, Any]) -> Role:
    fmt = body.get("response_format")
    schema = fmt.get("json_schema") if isinstance(fmt, dict) else None
    name = schema.get("name") if isinstance(schema, dict) else None
    return "policy" if name == "policy_reply" else "validator" if name == "validator_verdict" else "localizer"


# ---------------------------------------------------------------- HTTP plumbing


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Request:
    method: str
    path: str
    body: bytes
    keep_alive: bool


@dataclass
class _Response:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    stall: bool = False  # "stall" fault: send half the reply, then hold the connection until the server stops


def _error(status: int, message: str, kind: str, code: str | None = None) -> _Response:
    return _Response(status, {"error": {"message": message, "type": kind, "code": code}})


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks: list[bytes] = []
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0].strip() or b"0", 16):
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)
    while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
        pass
    return b"".join(chunks)


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    """Read one request; ``None`` when the client closed the connection cleanly."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    except asyncio.LimitOverrunError:
        raise _HttpError(431, "request headers too large") from None
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ", 2)
    except ValueError:
        raise _HttpError(400, "malformed request line") from None
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise _HttpError(400, "bad Content-Length") from None
        if length > MAX_BODY:
            raise _HttpError(413, "request body too large")
        body = await reader.readexactly(length)
    conn = headers.get("connection", "").lower()
    keep_alive = conn != "close" if version.strip() == "HTTP/1.1" else conn == "keep-alive"
    return _Request(method.upper(), target.split("?", 1)[0], body, keep_alive)


async def _send(writer: asyncio.StreamWriter, resp: _Response, keep_alive: bool) -> None:
    text = isinstance(resp.body, str)
    data = resp.body.encode() if text else json.dumps(resp.body).encode()
    head = [
        f"HTTP/1.1 {resp.status} {HTTPStatus(resp.status).phrase}",
        f"Content-Type: {'text/plain; version=0.0.4' if text else 'application/json'}",
        f"Content-Length: {len(data)}",
        f"Connection: {'keep-alive' if keep_alive else 'close'}",
        *(f"{k}: {v}" for k, v in resp.headers.items()),
    ]
    reply = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data
    if resp.stall:
        writer.write(reply[: len(reply) - len(data) // 2])
        await writer.drain()
        await asyncio.Event().wait()  # cancelled when the server stops
    writer.write(reply)
    await writer.drain()


# ---------------------------------------------------------------- the server


class FakeModelServer:
    """Scripted stand-in for the policy, localizer and validator model endpoints."""

    def __init__(
        self,
        script: Script | Mapping[str, Any] | str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
    ) -> None:
        self.script = load_script(script)
        self.host, self.port, self.record = host, port, record
        self.requests: list[RecordedRequest] = []
        self.request_counts: dict[str, int] = {}
        self.fault_counts: dict[str, int] = {}
        self._rng = random.Random()
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[Any]] = set()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.reset()

    # ---- lifecycle

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8123``."""
        if self._server is None:
            raise RuntimeError("FakeModelServer is not running")
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def base_url(self, role: str) -> str:
        """OpenAI ``base_url`` for one role."""
        return f"{self.url}/{role}/v1"

    def reset(self) -> None:
        """Clear the request log, counters and the fault RNG."""
        self.requests.clear()
        self.metrics: dict[str, int] = dict.fromkeys(
            (
                "vllm:prompt_tokens_total",
                "vllm:generation_tokens_total",
                "vllm:prefix_cache_queries_total",
                "vllm:prefix_cache_hits_total",
            ),
            0,
        )
        self._seen_prefixes: set[str] = set()
        self.request_counts.update(dict.fromkeys(ROLES, 0))
        self.fault_counts.update(dict.fromkeys(FAULT_KINDS, 0))
        self._rng.seed(self.script.seed)
        even = self.script.fault_schedule == "even"
        self._owed: dict[str, float] = {k: self._rng.random() for k in self.script.fault_rates} if even else {}

    async def start(self) -> None:
        """Bind and start serving."""
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=1024 * 1024, backlog=2048)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop open connections."""
        if self._server is None:
            return
        self._server.close()
        for task in list(self._conns):
            task.cancel()
        await asyncio.gather(*self._conns, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> FakeModelServer:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def start_in_thread(self) -> None:
        """Serve from a private event loop in a daemon thread."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # reported to the caller below
                failure.append(exc)
            ready.set()
            if not failure:
                loop.run_forever()
            loop.close()

        thread = threading.Thread(target=run, name="fake-model-server", daemon=True)
        thread.start()
        ready.wait()
        if failure:
            raise failure[0]
        self._thread, self._loop = thread, loop

    def stop_thread(self) -> None:
        """Stop a server started with :meth:`start_in_thread`."""
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._thread = self._loop = None

    # ---- HTTP

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._conns.add(task)
        try:
            while True:
                try:
                    req = await _read_request(reader)
                except _HttpError as exc:
                    await _send(writer, _error(exc.status, str(exc), "invalid_request_error"), False)
                    break
                if req is None:
                    break
                try:
                    resp = await self._route(req)
                except Exception as exc:  # a bug here should reach the client, not hang it
                    resp = _error(500, f"fake model server error: {exc!r}", "server_error")
                if resp is None:  # "disconnect" fault
                    writer.transport.abort()
                    break
                await _send(writer, resp, req.keep_alive)
                if not req.keep_alive:
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        except asyncio.CancelledError:
            pass  # stop() cancels open connections; a cancelled stream task makes 3.11 log an error
        finally:
            if task is not None:
                self._conns.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _route(self, req: _Request) -> _Response | None:
        path = req.path.rstrip("/") or "/"
        if req.method == "GET" and path == "/_requests":
            return _Response(200, [r.model_dump(mode="json") for r in self.requests])
        if req.method == "GET" and path == "/_stats":
            return _Response(200, {"requests": self.request_counts, "faults": self.fault_counts})
        if req.method == "GET" and path == "/metrics":
            return _Response(200, self._metrics_text())
        if req.method == "POST" and path == "/_reset":
            self.reset()
            return _Response(200, {"ok": True})
        if req.method == "GET" and (m := _MODELS_RE.fullmatch(path)):
            roles: Sequence[Role] = [cast(Role, m["role"])] if m["role"] else ROLES
            data = [
                {"id": self.script.model_name(r), "object": "model", "created": 0, "owned_by": "webagent"}
                for r in roles
            ]
            return _Response(200, {"object": "list", "data": data})
        if req.method == "POST" and (m := _CHAT_RE.fullmatch(path)):
            return await self._chat(req.path, cast("Role | None", m["role"]), req.body)
        return _error(404, f"no route for {req.method} {req.path}", "invalid_request_error", "not_found")

    # ---- chat completions

    def _pick_fault(self, role: Role, nth: int, *, repair: bool = False) -> FaultKind | None:
        rates = self.script.fault_rates
        if self.script.fault_schedule == "even":
            for kind in rates:
                self._owed[kind] += rates[kind]
            drawn = sorted((k for k in FAULT_KINDS if self._owed.get(k, 0.0) >= 1.0), key=lambda k: -self._owed[k])
        else:  # always draw every rate so the random stream does not depend on deterministic faults
            drawn = [k for k in FAULT_KINDS if k in rates and self._rng.random() < rates[k]]
        if repair and not self.script.fault_repairs:
            drawn = [k for k in drawn if k not in REPLY_FAULTS]
        scripted = next((f.kind for f in self.script.faults if f.role == role and f.nth == nth), None)
        candidates = [scripted] if scripted else drawn
        fault = next((k for k in candidates if k != "offtarget" or role == "localizer"), None)
        if fault is not None and not scripted and fault in self._owed:
            self._owed[fault] -= 1.0  # an even fault that could not land here stays owed
        return fault

    async def _chat(self, path: str, role: Role | None, raw: bytes) -> _Response | None:
        try:
            body = json.loads(raw if self.record else shrink_images(raw))
        except ValueError:
            try:  # not valid JSON, or something shrink_images did not foresee: decide on the whole body
                body = json.loads(raw)
            except ValueError:
                return _error(400, "request body is not valid JSON", "invalid_request_error")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "'messages' must be a list", "invalid_request_error")
        role = role or _infer_role(body)
        messages = [m for m in body["messages"] if isinstance(m, dict)]
        model = str(body.get("model") or self.script.model_name(role))
        self.request_counts[role] += 1
        repair = any(m.get("role") == "assistant" for m in messages)  # a reply quoted back for repair
        fault = self._pick_fault(role, self.request_counts[role], repair=repair)
        user = _first_user(messages)
        rec = RecordedRequest(
            role=role,
            path=path,
            model=model,
            fault=fault,
            text="\n".join(_texts(user)),
            system="\n".join(t for m in messages if m.get("role") == "system" for t in _texts(m.get("content"))),
            messages_count=len(messages),
            extra={k: v for k, v in body.items() if k not in ("messages", "model")},
        )
        sizes = [image_size(u) for m in messages for u in _image_urls(m.get("content"))]
        rec.n_images, rec.image_sizes = len(sizes), [list(s) for s in sizes if s]
        content = self._answer(rec, model, user, fault == "offtarget")
        if fault == "malformed":
            content = MALFORMED
        elif fault == "schema":
            content = WRONG_SHAPE[role]
        if fault:
            self.fault_counts[fault] += 1
        if self.record:
            rec.messages = _digest_images(messages)
            self.requests.append(rec)
        await asyncio.sleep(self.script.latency(role) + (self.script.slow_s if fault == "slow" else 0.0))
        if fault == "disconnect":
            return None
        if fault == "500":
            return _error(500, "injected server error", "server_error", "internal_error")
        if fault == "429":
            resp = _error(429, "injected rate limit", "rate_limit_exceeded", "rate_limit_exceeded")
            resp.headers["Retry-After"] = str(self.script.retry_after_s)
            return resp
        usage = estimate_usage(messages, rec.image_sizes, content)
        self._count_tokens(rec.system, usage)
        return _Response(200, self._completion(model, content, usage), stall=fault == "stall")

    def _count_tokens(self, system: str, usage: dict[str, int]) -> None:
        """vLLM-style counters; the prefix cache "hits" on a system prompt seen before."""
        counters = self.metrics
        counters["vllm:prompt_tokens_total"] += usage["prompt_tokens"]
        counters["vllm:generation_tokens_total"] += usage["completion_tokens"]
        counters["vllm:prefix_cache_queries_total"] += usage["prompt_tokens"]
        if system and system in self._seen_prefixes:
            counters["vllm:prefix_cache_hits_total"] += math.ceil(len(system) / 4)
        elif system:
            self._seen_prefixes.add(system)

    def _metrics_text(self) -> str:
        lines = []
        for name, value in self.metrics.items():
            lines += [f"# TYPE {name} counter", f'{name}{{model_name="fake"}} {value}']
        return "\n".join(lines) + "\n"

    def _answer(self, rec: RecordedRequest, model: str, user: Any, offtarget: bool) -> str:
        """Scripted reply text; fills ``rec.task``/``rec.step``."""
        if rec.role == "localizer":
            return self._click(model, rec.text, rec.image_sizes, offtarget=offtarget)
        task = self.script.task_for(rec.text)
        rec.task = task.id if task else None
        if rec.role == "validator":
            if task is None:
                return json.dumps({"success": False, "feedback": "No scripted task matched this request."})
            ok, feedback = task.judge(candidate_answer(_texts(user)), parse_policy_prompt(rec.text).url)
            return json.dumps({"success": ok, "feedback": feedback})
        state = parse_policy_prompt(rec.text)
        rec.step = state.step
        rule = task.policy_rule(state) if task else None
        return rule.reply() if rule else NO_ACTION

    def _click(self, model: str, text: str, sizes: list[list[int]], *, offtarget: bool) -> str:
        vp = self.script.viewport
        w, h = sizes[0] if sizes else (vp.width, vp.height)
        profile = localizer_profile(model, self.script.localizer_profile)
        hit = None if offtarget else self.script.find_element(text)
        if hit is None:
            x, y = (w + 100, h + 100) if offtarget else (w + 50, h // 2)
        else:
            scale = max(w / vp.width, h / vp.height)
            x, y = round(hit[1][0] * scale), round(hit[1][1] * scale)
        return format_click(profile, x, y, w, h)

    @staticmethod
    def _completion(model: str, content: str, usage: dict[str, int]) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": usage,
        }


# ---------------------------------------------------------------- CLI


async def _serve(script: Script, host: str, port: int, record: bool = True) -> None:
    server = FakeModelServer(script, host=host, port=port, record=record)
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"{READY_PREFIX}{server.url}", flush=True)
    try:
        await stop.wait()
    finally:
        await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m webagent.testing.server --script FILE [--host H] [--port P]``."""
    parser = argparse.ArgumentParser(prog="python -m webagent.testing.server", description=__doc__)
    parser.add_argument("--script", required=True, help="script JSON file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="keep no request log and JSON-parse only the head of each image (long benchmark runs)",
    )
    args = parser.parse_args(argv)
    try:
        script = load_script(args.script)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(script, args.host, args.port, record=not args.no_record))
    except OSError as exc:
        print(f"error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
