"""The only place that sends HTTP: an OpenAI-compatible chat client with retries and repair.

Retries (tenacity) cover 429 (honouring ``Retry-After``), 5xx, timeouts and connection errors,
with capped exponential backoff. A reply that cannot be parsed gets one repair request quoting
the error. Every call is accounted in a ``ModelCall`` record (tokens, latency, retries, repairs).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from .._version import __version__
from ..config import RoleConfig
from ..errors import ModelError, ModelReplyError, ModelUnavailableError
from ..records import ModelCall, RoleUsage
from ..secrets import Secrets
from .http11 import DefaultTransport
from .parsing import ReplyParseError
from .transport import HTTPReply, Transport, TransportError
from .wire import encode_chat_body

__all__ = ["Completion", "Message", "ModelClient"]

log = structlog.get_logger("webagent.model")
T = TypeVar("T")
Message = dict[str, Any]

RETRY_MAX_WAIT_S = 30.0
RETRY_BASE_S = 0.5


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float


class HTTPStatusError(Exception):
    """A reply with an error status (inside the client; callers get a ModelError)."""

    def __init__(self, reply: HTTPReply) -> None:
        self.status = reply.status
        self.retry_after_s = reply.retry_after_s
        self.detail = _error_detail(reply.body)
        super().__init__(f"HTTP {reply.status}: {self.detail}")


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, TransportError):  # refused, dropped or timed out
        return True
    if isinstance(exc, HTTPStatusError):
        return exc.status in (408, 409, 429) or exc.status >= 500
    return False


def _wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    hinted = exc.retry_after_s if isinstance(exc, HTTPStatusError) else None
    if hinted is not None:
        return min(hinted, RETRY_MAX_WAIT_S)
    backoff: float = RETRY_BASE_S * 2.0 ** (state.attempt_number - 1)
    return min(backoff, RETRY_MAX_WAIT_S)


ENDPOINT_COOLDOWN_S = 30.0


class Endpoint:
    """One server of a role, with its load: requests in flight and sessions stuck to it."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.in_flight = 0
        self.sessions = 0
        self.down_until = 0.0

    def load(self) -> tuple[bool, int, int]:
        return (time.monotonic() < self.down_until, self.in_flight, self.sessions)


class EndpointPool:
    """The servers of one role, shared by every session, over one pool of HTTP connections."""

    def __init__(self, role: str, config: RoleConfig, transport: Transport | None = None) -> None:
        urls = config.endpoints() if config.model else []
        self.role = role
        self.config = config
        self.transport: Transport = transport or DefaultTransport()
        self.headers = {
            "Authorization": f"Bearer {config.api_key or _default_api_key()}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": f"webagent/{__version__}",
        }
        self.endpoints = [Endpoint(url) for url in urls]

    def pick(self, exclude: Endpoint | None = None) -> Endpoint:
        """The least-loaded endpoint (healthy first, then fewest requests in flight, then sessions)."""
        if not self.endpoints:
            raise ModelError(f"the {self.role} model has no base_url/model configured", role=self.role)
        candidates = [e for e in self.endpoints if e is not exclude] or self.endpoints
        return min(candidates, key=Endpoint.load)

    async def aclose(self) -> None:
        await self.transport.aclose()


class ModelClient:
    """Chat completions for one role in one session.

    The session sticks to the endpoint it first used (so a server's prefix cache keeps serving
    it); if that endpoint stays unavailable after all retries, it fails over to another one.
    """

    def __init__(self, role: str, config: RoleConfig, pool: EndpointPool | None = None) -> None:
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
        if extra_body:
            body.update(extra_body)
        encoded = encode_chat_body(body)
        transport, headers, timeout_s = self.pool.transport, self.pool.headers, self.config.timeout_s

        async def post() -> HTTPReply:
            reply = await transport.post(endpoint.url, encoded, headers, timeout_s)
            if reply.status >= 300:
                raise HTTPStatusError(reply)
            return reply

        start = time.perf_counter()
        endpoint.in_flight += 1
        try:
            first: HTTPStatusError | TransportError | None = None
            try:  # the first attempt outside tenacity: most requests need no retry machinery
                reply = await post()
            except (HTTPStatusError, TransportError) as exc:
                if not _retryable(exc):
                    raise
                first = exc
            if first is not None:
                reply = await self._retry(post, first, usage)
        except HTTPStatusError as exc:
            usage.failures += 1
            usage.latency_s += time.perf_counter() - start
            raise self._status_error(exc, endpoint.base_url) from None
        except TransportError as exc:
            usage.failures += 1
            usage.latency_s += time.perf_counter() - start
            what = "timed out" if exc.timeout else f"could not be reached ({_short(exc, 120)})"
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
        text, prompt_tokens, completion_tokens = _read_completion(reply.body)
        usage.calls += 1
        usage.prompt_tokens += prompt_tokens
        usage.completion_tokens += completion_tokens
        usage.latency_s += latency
        return Completion(text, prompt_tokens, completion_tokens, latency)

    async def _retry(self, post: Callable[[], Awaitable[HTTPReply]], first: Exception, usage: RoleUsage) -> HTTPReply:
        """The attempts after a first one that failed with ``first`` (replayed to tenacity as attempt 1,
        so its wait, the retry count and the stop rule are the same as if tenacity had made it)."""
        failed: Exception | None = first
        retrying = AsyncRetrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(self.config.max_retries + 1),
            wait=_wait,
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
        log.info("model_retry", role=self.role, attempt=state.attempt_number, error=_short(exc))

    def _status_error(self, exc: HTTPStatusError, base_url: str) -> ModelError:
        detail = _short(exc.detail)
        where = f"the {self.role} model {self.model!r} at {base_url}"
        if _retryable(exc):
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
        parse: Callable[[str], T],
        *,
        response_format: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        repair_hint: str = "",
    ) -> tuple[T, ModelCall]:
        """Complete and parse; on a parse error send one repair request quoting the error.

        Raises ModelReplyError (with ``.call`` set) when the repaired reply fails too.
        """
        record = ModelCall(role=self.role, model=self.model)  # type: ignore[arg-type]
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
        parse: Callable[[str], T],
        response_format: dict[str, Any] | None,
        extra_body: dict[str, Any] | None,
        repair_hint: str,
    ) -> tuple[T, ModelCall]:
        first = await self.complete(
            messages, response_format=response_format, extra_body=extra_body, usage=record.usage
        )
        record.raw.append(first.text)
        try:
            return parse(first.text), record
        except ReplyParseError as exc:
            error = str(exc)
        log.info("model_repair", role=self.role, error=error)
        repair = [
            *messages,
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": _repair_text(error, repair_hint)},
        ]
        record.usage.repairs += 1
        second = await self.complete(repair, response_format=response_format, extra_body=extra_body, usage=record.usage)
        record.raw.append(second.text)
        try:
            return parse(second.text), record
        except ReplyParseError as exc:
            record.usage.failures += 1
            record.error = f"unusable reply after one repair: {exc}"
            raise ModelReplyError(
                f"the {self.role} model's reply was unusable: {exc}", role=self.role, raw=second.text
            ) from None


def _read_completion(raw: bytes) -> tuple[str, int, int]:
    """Reply text and token counts from a chat.completion body (odd bodies give empty text)."""
    try:
        data = json.loads(raw)
        message = data["choices"][0]["message"]
        text = message.get("content") or ""
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return (raw.decode("utf-8", "replace")[:2000] if isinstance(raw, bytes) else ""), 0, 0
    usage = data.get("usage") or {}
    return str(text), int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def _repair_text(error: str, hint: str) -> str:
    from ..prompts import render

    return render("repair.jinja", error=error, hint=hint)


def _error_detail(body: bytes) -> str:
    """The message of an error reply (OpenAI's ``{"error": {"message": ...}}`` and common variants)."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data)
        for value in (error.get("message"), error.get("detail")) if isinstance(error, dict) else (error,):
            if isinstance(value, str) and value.strip():
                return value
    text = body.decode("utf-8", "replace").strip()
    return text or "no details in the reply"


def _default_api_key() -> str:
    return os.environ.get("OPENAI_API_KEY") or "EMPTY"


def _short(exc: BaseException | str | None, limit: int = 200) -> str:
    if exc is None:
        return ""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
