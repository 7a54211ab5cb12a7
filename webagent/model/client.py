"""The only place that sends HTTP: an OpenAI-compatible chat client with retries and repair.

Requests are configured by the ``openai`` SDK (``AsyncOpenAI``, one per endpoint: base URL, auth,
headers) and sent on one pooled ``aiohttp`` session per role, set up as the SDK's aiohttp transport
sets up its own (``endpoints.py``; through the SDK's httpx2 client where a proxy or a redirect is
involved).
The SDK's own retries are off; retries (tenacity) cover 429 (honouring ``Retry-After``), 5xx,
timeouts and connection errors, with capped exponential backoff. A reply that cannot be parsed
gets one repair request quoting the error. Every call is accounted in a ``ModelCall`` record
(tokens, latency, retries, repairs).

The body is JSON-encoded by ``wire.py`` (screenshots spliced in verbatim) and sent raw
(``EndpointPool.send``: the endpoint's URL, auth and headers): ``chat.completions.create`` would
walk every message part against the SDK's types, JSON-encode the ~400 kB of base64 again and build
pydantic models of the reply, ~2.5 ms of CPU per request more, ``AsyncOpenAI.post`` ~0.5 ms more,
and even httpx2's layer over aiohttp ~0.13 ms more (``benchmarks/model_cpu.py``; ``docs/benchmarks.md``,
"The model client's CPU"). vLLM-specific fields (``chat_template_kwargs``,
guided decoding, ...) are merged into that body, as ``extra_body`` would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import httpx2
import openai
import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from ..config import RoleConfig
from ..errors import ModelError, ModelReplyError, ModelUnavailableError
from ..guard.secrets import Secrets
from ..records import ModelCall, Role, RoleUsage, TokenRecord
from .endpoints import ENDPOINT_COOLDOWN_S, Endpoint, EndpointPool
from .parsing import ReplyParseError
from .replies import (
    TOKEN_FIELDS,
    HTTPStatusError,
    NoReplyError,
    Reply,
    no_reply,
    read_completion,
    read_tokens,
    retry_wait,
    retryable,
    short,
)
from .wire import encode_chat_body

__all__ = ["Completion", "Message", "ModelClient", "Reply"]

log = structlog.get_logger("webagent.model")
T = TypeVar("T")
Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Completion:
    text: Reply
    """The reply's text, with its native tool calls (``text.tool_calls``)."""
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    tokens: TokenRecord | None = None
    """The request's tokens as the server gave them (the role's ``return_tokens``; None otherwise)."""


class ModelClient:
    """Chat completions for one role in one session.

    The session sticks to the endpoint it first used (so a server's prefix cache keeps serving
    it); if that endpoint stays unavailable after all retries, it fails over to another one.
    """

    def __init__(self, role: Role, config: RoleConfig, pool: EndpointPool | None = None) -> None:
        self.role = role
        self.config = config
        self.pool = pool or EndpointPool(role, config)
        self._owns_pool = pool is None
        self.model: str = config.model or ""
        self.endpoint: Endpoint | None = None
        #: When set, every request's text is redacted (secret values -> {{NAME}}) before it is sent.
        self.secrets: Secrets | None = None
        #: Called after each answered request and each failed attempt that will be retried (a batch
        #: watchdog's sign of progress: every attempt has its own deadline).
        self.on_answer: Callable[[], None] | None = None

    async def aclose(self) -> None:
        self.release()
        if self._owns_pool:
            await self.pool.aclose()

    def release(self) -> None:
        """End this session's stickiness (call when the session ends)."""
        if self.endpoint is not None:
            self.endpoint.sessions -= 1
            self.endpoint = None

    def follow(self, base_url: str) -> None:
        """Stick to this role's endpoint at ``base_url``, when it has one: a request that continues
        another role's conversation goes to the server whose prefix cache holds it."""
        if self.endpoint is not None and self.endpoint.base_url == base_url:
            return
        endpoint = next((e for e in self.pool.endpoints if e.base_url == base_url), None)
        if endpoint is None:
            return
        if self.endpoint is not None:
            self.endpoint.sessions -= 1
        endpoint.sessions += 1
        self.endpoint = endpoint

    def _stick(self, exclude: Endpoint | None = None) -> Endpoint:
        endpoint = self.pool.pick(exclude)
        if self.endpoint is not None:
            self.endpoint.sessions -= 1
        endpoint.sessions += 1
        self.endpoint = endpoint
        return endpoint

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        response_format: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        usage: RoleUsage,
    ) -> Completion:
        """One completion, retried on transient failures; ``usage`` counts the retries."""
        endpoint = self.endpoint or self._stick()
        try:
            return await self._complete(endpoint, messages, response_format, extra_body, usage)
        except ModelUnavailableError:
            if len(self.pool.endpoints) == 1:
                raise
            endpoint.down_until = time.monotonic() + ENDPOINT_COOLDOWN_S
            other = self._stick(exclude=endpoint)
            log.warning("model_failover", role=self.role, frm=endpoint.base_url, to=other.base_url)
            usage.failures -= 1  # the failover attempt decides
            return await self._complete(other, messages, response_format, extra_body, usage)

    async def _complete(
        self,
        endpoint: Endpoint,
        messages: Sequence[Message],
        response_format: dict[str, Any] | None,
        extra_body: dict[str, Any] | None,
        usage: RoleUsage,
    ) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.secrets.redact_messages(messages) if self.secrets else list(messages),
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }
        if response_format is not None:
            body["response_format"] = response_format
        if self.config.return_tokens:
            body.update(TOKEN_FIELDS)
        if extra_body:
            body.update(extra_body)
        encoded = encode_chat_body(body)
        timeout_s = self.config.timeout_s

        async def post() -> bytes:
            try:
                async with asyncio.timeout(timeout_s):  # one deadline for the whole exchange
                    status, headers, content = await self.pool.send(endpoint, encoded)
            except (openai.OpenAIError, httpx2.HTTPError, aiohttp.ClientError, OSError) as exc:
                raise no_reply(exc, timeout_s) from None  # OSError includes the deadline's TimeoutError
            if status >= 300:  # an error, or a redirect not followed
                raise HTTPStatusError(status, headers, content)
            return content

        start = time.perf_counter()
        endpoint.in_flight += 1
        try:
            first: HTTPStatusError | NoReplyError | None = None
            try:  # the first attempt outside tenacity: most requests need no retry machinery
                reply = await post()
            except (HTTPStatusError, NoReplyError) as exc:
                if not retryable(exc):
                    raise
                first = exc
            if first is not None:
                reply = await self._retry(post, first, usage)
        except HTTPStatusError as exc:
            usage.failures += 1
            usage.latency_s += time.perf_counter() - start
            raise self._status_error(exc, endpoint.base_url) from None
        except NoReplyError as exc:
            usage.failures += 1
            usage.latency_s += time.perf_counter() - start
            what = "timed out" if exc.timeout else f"could not be reached ({short(exc, 120)})"
            raise ModelUnavailableError(
                f"the {self.role} model at {endpoint.base_url} {what} after "
                f"{self.config.max_retries + 1} attempts; check the server and --{self.role}-base-url",
                role=self.role,
            ) from None
        finally:
            endpoint.in_flight -= 1
        latency = time.perf_counter() - start
        if self.on_answer is not None:
            self.on_answer()
        text, prompt_tokens, completion_tokens, cached_tokens = read_completion(reply)
        usage.calls += 1
        usage.prompt_tokens += prompt_tokens
        usage.cached_tokens += cached_tokens
        usage.completion_tokens += completion_tokens
        usage.latency_s += latency
        tokens = read_tokens(reply) if self.config.return_tokens else None
        return Completion(text, prompt_tokens, completion_tokens, latency, tokens)

    async def _retry(self, post: Callable[[], Awaitable[bytes]], first: Exception, usage: RoleUsage) -> bytes:
        """The attempts after a first one that failed with ``first`` (replayed to tenacity as attempt 1,
        so its wait, the retry count and the stop rule are the same as if tenacity had made it)."""
        failed: Exception | None = first
        retrying = AsyncRetrying(
            retry=retry_if_exception(retryable),
            stop=stop_after_attempt(self.config.max_retries + 1),
            wait=retry_wait,
            reraise=True,
            before_sleep=lambda st: self._on_retry(st, usage),
        )
        async for attempt in retrying:
            with attempt:
                if failed is not None:
                    exc, failed = failed, None
                    raise exc
                return await post()
        raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover

    def _on_retry(self, state: RetryCallState, usage: RoleUsage) -> None:
        usage.retries += 1
        if self.on_answer is not None:  # an attempt ended within its deadline: not a stuck run
            self.on_answer()
        exc = state.outcome.exception() if state.outcome else None
        log.info("model_retry", role=self.role, attempt=state.attempt_number, error=short(exc))

    def _status_error(self, exc: HTTPStatusError, base_url: str) -> ModelError:
        detail = short(exc.detail)
        where = f"the {self.role} model {self.model!r} at {base_url}"
        if retryable(exc):
            return ModelUnavailableError(
                f"{where} kept failing (HTTP {exc.status}: {detail}) after {self.config.max_retries + 1} attempts",
                role=self.role,
            )
        hint = {
            401: "check the API key",
            403: "check the API key",
            404: "check the model name and base URL",
        }.get(exc.status, "check the request settings")
        return ModelError(f"{where} refused the request (HTTP {exc.status}: {detail}); {hint}", role=self.role)

    async def call(
        self,
        messages: Sequence[Message],
        parse: Callable[[Reply], T],
        *,
        response_format: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        repair_hint: str = "",
    ) -> tuple[T, ModelCall]:
        """Complete and parse; on a parse error send one repair request quoting the error.

        ``parse`` gets the reply's text (a ``Reply``, a ``str`` carrying its native tool calls).
        Raises ModelReplyError (with ``.call`` set) when the repaired reply fails too.
        """
        record = ModelCall(role=self.role, model=self.model)
        try:
            return await self._call(record, messages, parse, response_format, extra_body, repair_hint)
        except ModelError as exc:
            record.error = record.error or str(exc)
            exc.call = record
            raise

    async def _call(
        self,
        record: ModelCall,
        messages: Sequence[Message],
        parse: Callable[[Reply], T],
        response_format: dict[str, Any] | None,
        extra_body: dict[str, Any] | None,
        repair_hint: str,
    ) -> tuple[T, ModelCall]:
        first = await self.complete(
            messages, response_format=response_format, extra_body=extra_body, usage=record.usage
        )
        record.raw.append(first.text)
        record.tool_calls = list(first.text.tool_calls)
        _keep_tokens(record, first)
        try:
            return parse(first.text), record
        except ReplyParseError as exc:
            error = str(exc)
        log.info("model_repair", role=self.role, error=error)
        repair = [*messages, *_repair_messages(first.text, _repair_text(error, repair_hint))]
        record.usage.repairs += 1
        second = await self.complete(repair, response_format=response_format, extra_body=extra_body, usage=record.usage)
        record.raw.append(second.text)
        record.tool_calls = list(second.text.tool_calls)
        _keep_tokens(record, second)
        try:
            return parse(second.text), record
        except ReplyParseError as exc:
            record.usage.failures += 1
            record.error = f"unusable reply after one repair: {exc}"
            raise ModelReplyError(
                f"the {self.role} model's reply was unusable: {exc}", role=self.role, raw=second.text
            ) from None


def _keep_tokens(record: ModelCall, completion: Completion) -> None:
    """The request's tokens on the call's record, one per reply (when they were asked for)."""
    if completion.tokens is not None:
        record.tokens = [*(record.tokens or []), completion.tokens]


def _repair_messages(reply: Reply, text: str) -> list[Message]:
    """The reply that could not be used, then the request to correct it: a user turn after a text
    reply, the tool result of each call after a reply with tool calls (as a chat template expects
    a tool call to be answered)."""
    if not reply.tool_calls:
        return [{"role": "assistant", "content": str(reply)}, {"role": "user", "content": text}]
    calls = [call.message_part() for call in reply.tool_calls]
    return [
        {"role": "assistant", "content": str(reply) or None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": call.id, "content": text} for call in reply.tool_calls),
    ]


def _repair_text(error: str, hint: str) -> str:
    from ..prompts import render

    return render("repair.jinja", error=error, hint=hint)
