"""The offline model server's HTTP pieces on ``aiohttp.web``: JSON replies and errors in the
OpenAI shape, routes that take trailing slashes, and the faults that break the exchange itself
(a stalled body, a connection closed without a reply)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

__all__ = ["Handler", "error_reply", "hang_up", "json_errors", "json_reply", "route", "say_keep_alive", "stall"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_reply(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=json.dumps(body).encode(), content_type="application/json", headers=headers)


def error_reply(
    status: int, message: str, kind: str, code: str | None = None, headers: Mapping[str, str] | None = None
) -> web.Response:
    return json_reply({"error": {"message": message, "type": kind, "code": code}}, status, headers)


def route(method: str, path: str, handler: Handler) -> web.RouteDef:
    """A route that also takes the path with trailing slashes (``HEAD`` is no ``GET`` here)."""
    return web.route(method, path + "{slash:/*}", handler)


async def say_keep_alive(request: web.Request, response: web.StreamResponse) -> None:
    """Name keep-alive in every reply that keeps the connection (aiohttp leaves HTTP/1.1's implicit)."""
    if response.keep_alive and "Connection" not in response.headers:
        response.headers["Connection"] = "keep-alive"


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors in the OpenAI shape: no route (any unknown path or method is a 404), 413, and 500."""
    try:
        return await handler(request)
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        path = request.rel_url.raw_path
        return error_reply(404, f"no route for {request.method} {path}", "invalid_request_error", "not_found")
    except web.HTTPRequestEntityTooLarge:
        reply = error_reply(413, "request body too large", "invalid_request_error")
        reply.force_close()
        return reply
    except ConnectionError:  # the client went away: there is no one to answer
        return hang_up(request)
    except Exception as exc:  # a bug here should reach the client, not hang it
        return error_reply(500, f"fake model server error: {exc!r}", "server_error")


async def stall(request: web.Request, reply: Any) -> web.StreamResponse:
    """The "stall" fault: the head and half the body of the reply, then nothing until the server stops."""
    data = json.dumps(reply).encode()
    resp = web.StreamResponse()
    resp.content_type = "application/json"
    resp.content_length = len(data)
    await resp.prepare(request)
    await resp.write(data[: len(data) - len(data) // 2])
    await asyncio.Event().wait()  # cancelled by stop()
    return resp


def hang_up(request: web.Request) -> web.Response:
    """Close the connection without a reply: aiohttp cannot send the response returned, and drops it."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response()
