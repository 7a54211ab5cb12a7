"""Offline OpenAI-compatible model server that answers from a script (served by ``aiohttp.web``).

The routes, the request log, the counters and the faults that break the HTTP exchange live here;
reading the messages, the scripted answers and the fault draws are :mod:`webagent.testing.chat`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import signal
import sys
import time
from collections import deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from aiohttp import web

from webagent.families import FAMILIES, get_family
from webagent.records import ROLES, Role
from webagent.testing.chat import (
    FaultDraw,
    RecordedRequest,
    completion,
    digest_images,
    infer_role,
    is_repair,
    recorded,
    reply_usage,
    scripted_reply,
)
from webagent.testing.contracts import ScriptedReply
from webagent.testing.http import Handler, error_reply, hang_up, json_errors, json_reply, route, say_keep_alive, stall
from webagent.testing.images import image_digests, shrink_images
from webagent.testing.prefixcache import (
    BLOCK_SIZE,
    CHARS_PER_TOKEN,
    DEFAULT_CAPACITY_BLOCKS,
    PrefillCounts,
    PrefixCache,
    family_of,
    reply_tokens,
    request_tokens,
)
from webagent.testing.script import FAULT_KINDS, Script, load_script
from webagent.testing.threaded import LoopThread
from webagent.testing.tokens import add_tokens, wants_tokens

__all__ = ["MAX_BODY", "READY_PREFIX", "FakeModelServer", "RecordedRequest", "main"]

READY_PREFIX = "webagent fake model server listening on "
MAX_BODY = 64 * 1024 * 1024
_ROLE = "/{role:policy|localizer|validator}"


#: Answers whose timings ``/_stats`` summarizes (the latest; a long-running server keeps no more).
TIMINGS_KEPT = 100_000


class FakeModelServer:
    """Scripted stand-in for the policy, localizer and validator model endpoints."""

    def __init__(
        self,
        script: Script | Mapping[str, Any] | str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        record: bool = True,
        keep_raw: bool = False,
        family: str | None = None,
        cache_blocks: int = DEFAULT_CAPACITY_BLOCKS,
        block_size: int = BLOCK_SIZE,
        mamba_align: bool = False,
    ) -> None:
        """``record``: keep each chat request parsed (``requests``); ``keep_raw``: also keep its
        method, path and body byte for byte (``raw``: what a test checks for leaked data).
        ``family``: the image-token family of every model served (default: told by each request's
        model name, see :func:`~webagent.testing.prefixcache.family_of`); ``cache_blocks``: the
        simulated prefix cache's capacity in blocks of ``block_size`` tokens; ``mamba_align``: a
        hybrid Mamba model's cache in vLLM's align mode (one checkpoint per request, see
        :class:`~webagent.testing.prefixcache.PrefixCache`)."""
        self.script = load_script(script)
        self.family = get_family(family) if family is not None else None
        self.cache = PrefixCache(block_size=block_size, capacity=cache_blocks, checkpoints=mamba_align)
        self.host, self.port, self.record, self.keep_raw = host, port, record, keep_raw
        self.requests: list[RecordedRequest] = []
        self.raw: list[bytes] = []
        self.request_counts: dict[str, int] = {}
        self.fault_counts: dict[str, int] = {}
        self._faults = FaultDraw(self.script)
        self._runner: web.AppRunner | None = None
        self._busy: set[asyncio.Task[Any]] = set()  # the requests being answered, cancelled by stop()
        self._thread = LoopThread("fake-model-server")
        self.reset()

    # ---- lifecycle

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:8123``."""
        if self._runner is None:
            raise RuntimeError("FakeModelServer is not running")
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def base_url(self, role: str) -> str:
        """OpenAI ``base_url`` for one role."""
        return f"{self.url}/{role}/v1"

    def reset(self) -> None:
        """Clear the request log, counters and the fault RNG."""
        self.requests.clear()
        self.raw.clear()
        self.cache.clear()
        self.counts = PrefillCounts(ROLES)
        #: vLLM's counters (what ``/metrics`` shows), and per role: requests answered, prompt
        #: tokens, of which cached, and the largest prompt (``/_stats``'s ``tokens``).
        self.metrics, self.token_stats = self.counts.metrics, self.counts.per_role
        self.request_counts.update(dict.fromkeys(ROLES, 0))
        self.fault_counts.update(dict.fromkeys(FAULT_KINDS, 0))
        self._faults.reset()
        #: Per answered chat request (the last ``TIMINGS_KEPT``): seconds from its arrival to the
        #: scripted wait (the body read and the reply prepared), and how far past the scripted wait
        #: the reply was ready (the server's event loop, late on a busy machine): a benchmark's
        #: model latency, split.
        self.timings: dict[str, deque[float]] = {
            name: deque(maxlen=TIMINGS_KEPT) for name in ("before_wait_s", "late_s")
        }

    async def start(self) -> None:
        """Bind and start serving."""
        # shutdown_timeout: stop() has cancelled the requests in hand; one that comes in meanwhile gets a moment.
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port, backlog=2048).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner, self.port = runner, runner.addresses[0][1]

    async def stop(self) -> None:
        """Stop listening and drop open connections, the requests in hand (stalled replies too) with them."""
        if self._runner is None:
            return
        for site in self._runner.sites:
            await site.stop()
        for task in self._busy:
            task.cancel()
        await asyncio.gather(*self._busy, return_exceptions=True)
        await self._runner.cleanup()
        self._runner = None

    async def __aenter__(self) -> FakeModelServer:
        await self.start()
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def start_in_thread(self) -> None:
        """Serve from a private event loop in a daemon thread (``threaded.LoopThread``)."""
        self._thread.start(self.start)

    def stop_thread(self) -> None:
        """Stop a server started with :meth:`start_in_thread`."""
        self._thread.stop(self.stop)

    # ---- HTTP

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._track, json_errors])
        app.on_response_prepare.append(say_keep_alive)
        chat, models = "/v1/chat/completions", "/v1/models"
        app.add_routes(
            [
                route("GET", "/_requests", self._requests),
                route("GET", "/_stats", self._stats),
                route("GET", "/metrics", self._metrics),
                route("POST", "/_reset", self._reset),
                route("GET", models, self._models),
                route("GET", _ROLE + models, self._models),
                route("POST", chat, self._chat),
                route("POST", _ROLE + chat, self._chat),
            ]
        )
        return app

    @web.middleware
    async def _track(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        task = cast("asyncio.Task[Any]", asyncio.current_task())  # aiohttp runs each request in a task
        self._busy.add(task)
        try:
            return await handler(request)
        finally:
            self._busy.discard(task)

    async def _requests(self, request: web.Request) -> web.Response:
        return json_reply([r.model_dump(mode="json") for r in self.requests])

    async def _stats(self, request: web.Request) -> web.Response:
        timings = {name: quantiles(values) for name, values in self.timings.items()}
        return json_reply(
            {
                "requests": self.request_counts,
                "faults": self.fault_counts,
                "tokens": self.token_stats,
                "timings": timings,
            }
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        lines = []
        for name, value in self.metrics.items():
            lines += [f"# TYPE {name} counter", f'{name}{{model_name="fake"}} {value}']
        text = "\n".join(lines) + "\n"
        return web.Response(body=text.encode(), headers={"Content-Type": "text/plain; version=0.0.4"})

    async def _reset(self, request: web.Request) -> web.Response:
        self.reset()
        return json_reply({"ok": True})

    async def _models(self, request: web.Request) -> web.Response:
        role = request.match_info.get("role")
        roles: Sequence[Role] = [cast(Role, role)] if role else ROLES
        data = [
            {"id": self.script.model_name(r), "object": "model", "created": 0, "owned_by": "webagent"} for r in roles
        ]
        return json_reply({"object": "list", "data": data})

    # ---- chat completions

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        arrived = time.monotonic()
        if (request.content_length or 0) > MAX_BODY:  # refused at once (read() would take MAX_BODY first)
            raise web.HTTPRequestEntityTooLarge(MAX_BODY, request.content_length or 0)
        raw = await request.read()
        if self.keep_raw:
            self.raw.append(f"{request.method} {request.rel_url.raw_path}\n".encode() + raw)
        try:
            body = json.loads(raw if self.record else shrink_images(raw))
        except ValueError:
            try:  # not valid JSON, or something shrink_images did not foresee: decide on the whole body
                body = json.loads(raw)
            except ValueError:
                return error_reply(400, "request body is not valid JSON", "invalid_request_error")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return error_reply(400, "'messages' must be a list", "invalid_request_error")
        role = cast("Role | None", request.match_info.get("role")) or infer_role(body)
        messages = [m for m in body["messages"] if isinstance(m, dict)]
        model = str(body.get("model") or self.script.model_name(role))
        self.request_counts[role] += 1
        repair = is_repair(messages)
        fault = self._faults.pick(role, self.request_counts[role], repair=repair)
        rec = recorded(body, messages, role=role, path=request.rel_url.raw_path, model=model, fault=fault)
        reply_message = scripted_reply(self.script, rec, body)
        if fault:
            self.fault_counts[fault] += 1
        if self.record:
            rec.messages = digest_images(messages)
            self.requests.append(rec)
        tokens = request_tokens(body, messages, image_digests(raw), self.family or family_of(model))
        wait_s = self.script.latency(role) + (self.script.slow_s if fault == "slow" else 0.0)
        waited = time.monotonic()
        await asyncio.sleep(wait_s)
        if fault == "disconnect":
            return hang_up(request)
        if fault == "500":
            return error_reply(500, "injected server error", "server_error", "internal_error")
        if fault == "429":
            retry_after = {"Retry-After": str(self.script.retry_after_s)}
            return error_reply(429, "injected rate limit", "rate_limit_exceeded", "rate_limit_exceeded", retry_after)
        usage = self._prefill(role, rec, tokens, reply_message)
        reply = completion(model, reply_message, usage)
        if wants_tokens(body):  # vLLM's return_token_ids and logprobs
            reply = add_tokens(reply, body, tokens, reply_tokens(*reply_message.generated()))
        self.timings["before_wait_s"].append(waited - arrived)
        self.timings["late_s"].append(time.monotonic() - waited - wait_s)
        return await stall(request, reply) if fault == "stall" else json_reply(reply)

    def _prefill(
        self, role: Role, rec: RecordedRequest, tokens: list[Hashable], reply: ScriptedReply
    ) -> dict[str, Any]:
        """Look the prompt up in the simulated prefix cache, cache it and the reply as generated
        (reasoning included), and count both as vLLM does; the reply's usage."""
        generated = reply.generated()
        lookup = self.cache.prefill(tokens, reply_tokens(*generated))
        usage = reply_usage(lookup.prompt_tokens, lookup.cached_tokens, "".join(generated))
        rec.prompt_tokens, rec.cached_tokens = lookup.prompt_tokens, lookup.cached_tokens
        self.counts.count(role, lookup, usage["completion_tokens"], math.ceil(rec.new_text_chars / CHARS_PER_TOKEN))
        return usage


# ---------------------------------------------------------------- CLI


async def _serve(
    script: Script,
    host: str,
    port: int,
    record: bool = True,
    family: str | None = None,
    cache_blocks: int = DEFAULT_CAPACITY_BLOCKS,
    block_size: int = BLOCK_SIZE,
    mamba_align: bool = False,
) -> None:
    server = FakeModelServer(
        script,
        host=host,
        port=port,
        record=record,
        family=family,
        cache_blocks=cache_blocks,
        block_size=block_size,
        mamba_align=mamba_align,
    )
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


def quantiles(values: Iterable[float]) -> dict[str, float]:
    """Count, mean, median and 90th percentile of ``values`` (zeros when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return {"count": 0, "mean": 0.0, "p50": 0.0, "p90": 0.0}
    p50, p90 = (ordered[min(len(ordered) - 1, int(q * len(ordered)))] for q in (0.5, 0.9))
    return {"count": len(ordered), "mean": sum(ordered) / len(ordered), "p50": p50, "p90": p90}


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m webagent.testing.server --script FILE [--host H] [--port P]``."""
    description = (__doc__ or "").partition("\n\n")[0]  # the first paragraph
    parser = argparse.ArgumentParser(prog="python -m webagent.testing.server", description=description)
    parser.add_argument("--script", required=True, help="script JSON file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="keep no request log and JSON-parse only the head of each image (long benchmark runs)",
    )
    parser.add_argument(
        "--family",
        choices=list(FAMILIES),
        default=None,
        help="image-token family of the models served, for the simulated prefix cache "
        "(default: told by each request's model name)",
    )
    parser.add_argument(
        "--cache-blocks",
        type=_positive,
        default=DEFAULT_CAPACITY_BLOCKS,
        help=f"capacity of the simulated prefix cache in blocks (default {DEFAULT_CAPACITY_BLOCKS})",
    )
    parser.add_argument(
        "--block-size",
        type=_positive,
        default=None,
        help=f"tokens per cache block (default {BLOCK_SIZE}; with --mamba-align and --family, the family's "
        "align-mode block size)",
    )
    parser.add_argument(
        "--mamba-align",
        action="store_true",
        help="simulate a hybrid Mamba model's cache in vLLM's align mode: one checkpoint per request, at its "
        "prompt's last full block (use with --block-size of the enlarged attention block, e.g. 672)",
    )
    args = parser.parse_args(argv)
    if args.block_size is None:
        blocks = get_family(args.family).serving.align_blocks if args.mamba_align and args.family else ()
        args.block_size = blocks[0] if blocks else BLOCK_SIZE
    try:
        script = load_script(args.script)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(
            _serve(
                script,
                args.host,
                args.port,
                record=not args.no_record,
                family=args.family,
                cache_blocks=args.cache_blocks,
                block_size=args.block_size,
                mamba_align=args.mamba_align,
            )
        )
    except OSError as exc:
        print(f"error: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
