"""CPU of this process per chat request: the model client and the openai SDK's ways of sending one.

Each request is a policy-sized body (~405 kB: a system prompt, 3 base64 JPEG-sized screenshots,
a strict ``response_format``) posted to a trivial aiohttp server in a child process that returns
a fixed completion (its CPU is not counted). After a warm-up, N requests run from C concurrent
workers and ``time.process_time`` per request is printed for each variant:

- ``client``: ``ModelClient.complete`` as the agent sends (works on any version of the tree, so
  ``PYTHONPATH=<other checkout> python benchmarks/model_cpu.py client`` measures another one);
- ``create-httpx`` / ``create-aiohttp``: ``AsyncOpenAI.chat.completions.create`` over the SDK's
  default httpx2 client / its aiohttp-backed one (``DefaultAioHttpClient``);
- ``post-httpx`` / ``post-aiohttp``: ``AsyncOpenAI.post`` of the body ``wire.py`` encodes;
- ``raw-aiohttp``: that body posted on an ``aiohttp`` session and its reply parsed, nothing else
  (the floor of any client).

    python benchmarks/model_cpu.py --requests 1000 --concurrency 10 client post-aiohttp create-aiohttp

Variants run one after the other against the same server; run them alternately a few times on a
busy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import random
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

REPLY = json.dumps(
    {
        "id": "bench",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": '{"thought": "ok", "action": {"type": "scroll"}}'},
            }
        ],
        "usage": {"prompt_tokens": 3000, "completion_tokens": 30, "total_tokens": 3030},
    }
).encode()

RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "policy",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"thought": {"type": "string"}, "action": {"type": "object", "properties": {}}},
            "required": ["thought", "action"],
            "additionalProperties": False,
        },
    },
}

VARIANTS = ("client", "create-httpx", "create-aiohttp", "post-httpx", "post-aiohttp", "raw-aiohttp")


def serve(port: int) -> None:
    from aiohttp import web

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=REPLY, content_type="application/json")

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def messages() -> list[dict[str, Any]]:
    from webagent.model.wire import DataURL

    rng = random.Random(1)
    parts: list[dict[str, Any]] = []
    for i in range(3):
        url = DataURL("data:image/jpeg;base64," + base64.b64encode(rng.randbytes(100_000)).decode())
        parts += [{"type": "text", "text": f"Step {i}: scrolled"}, {"type": "image_url", "image_url": {"url": url}}]
    parts.append({"type": "text", "text": "Task: find the price of the blue lamp\nCurrent URL: http://x/y"})
    system = "You are a web agent. " + "Guidelines: be careful and precise. " * 120
    return [{"role": "system", "content": system}, {"role": "user", "content": parts}]


async def sender(variant: str, base_url: str) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
    """One request of ``variant``, and how to close what it uses."""
    msgs = messages()
    if variant == "client":
        from webagent.config import RoleConfig
        from webagent.model.client import ModelClient
        from webagent.model.endpoints import EndpointPool
        from webagent.records import RoleUsage

        config = RoleConfig(base_url=base_url, model="m", api_key="k")
        pool = EndpointPool("policy", config)

        async def complete() -> None:
            c = ModelClient("policy", config, pool)
            await c.complete(msgs, response_format=RESPONSE_FORMAT, usage=RoleUsage())
            c.release()

        return complete, pool.aclose

    import httpx2
    import openai

    from webagent.model.wire import encode_chat_body

    if variant == "raw-aiohttp":  # the floor of any client: the encoded body posted on aiohttp itself
        import aiohttp

        session = aiohttp.ClientSession()
        raw_body = {"model": "m", "messages": msgs, "temperature": 0.0, "max_tokens": 1024}
        raw_body["response_format"] = RESPONSE_FORMAT
        headers = {"Content-Type": "application/json", "Authorization": "Bearer k"}

        async def raw() -> None:
            async with session.post(
                f"{base_url}/chat/completions", data=encode_chat_body(raw_body), headers=headers
            ) as r:
                assert json.loads(await r.read())["choices"][0]["message"]["content"]

        return raw, session.close

    how, _, stack = variant.partition("-")
    http = openai.DefaultAioHttpClient() if stack == "aiohttp" else openai.DefaultAsyncHttpxClient()
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0, http_client=http)
    body = {"model": "m", "messages": msgs, "temperature": 0.0, "max_tokens": 1024, "response_format": RESPONSE_FORMAT}

    async def create() -> None:
        completion = await client.chat.completions.create(**body, timeout=60.0)
        assert completion.choices[0].message.content

    async def post() -> None:
        response = await client.post(
            "/chat/completions",
            cast_to=httpx2.Response,
            content=encode_chat_body(body),
            options={"timeout": 60.0, "headers": {"Content-Type": "application/json"}},
        )
        assert json.loads(response.content)["choices"][0]["message"]["content"]

    return (create if how == "create" else post), client.close


async def measure(variant: str, base_url: str, requests: int, concurrency: int) -> float:
    one, close = await sender(variant, base_url)

    async def worker(n: int) -> None:
        for _ in range(n):
            await one()

    await asyncio.gather(*(worker(2) for _ in range(concurrency)))  # connections, imports, caches
    each, extra = divmod(requests, concurrency)
    start = time.process_time()
    await asyncio.gather(*(worker(each + (i < extra)) for i in range(concurrency)))
    cpu = time.process_time() - start
    await close()
    return cpu / requests


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("variants", nargs="*", help=f"any of {', '.join(VARIANTS)} (default: all)")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    if unknown := set(args.variants) - set(VARIANTS):
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        for _ in range(100):  # until it listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        for variant in args.variants or VARIANTS:
            cpu = asyncio.run(measure(variant, f"http://127.0.0.1:{port}/v1", args.requests, args.concurrency))
            print(
                f"{variant:16s} {cpu * 1e3:.3f} ms CPU per request ({args.requests} requests, {args.concurrency} at once)"
            )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
