"""The only place that sends HTTP: an OpenAI-compatible chat client with retries and repair.

Requests go through the ``openai`` SDK (``AsyncOpenAI``, one per endpoint, over one pooled
aiohttp-backed ``httpx2`` client per role: proxies, TLS and auth come from the SDK and httpx).
The SDK's own retries are off; retries (tenacity) cover 429 (honouring ``Retry-After``), 5xx,
timeouts and connection errors, with capped exponential backoff. A reply that cannot be parsed
gets one repair request quoting the error. Every call is accounted in a ``ModelCall`` record
(tokens, latency, retries, repairs).

The body is JSON-encoded by ``wire.py`` (screenshots spliced in verbatim) and posted raw with
``AsyncOpenAI.post``: ``chat.completions.create`` would walk every message part against the SDK's
types, JSON-encode the ~400 kB of base64 again and build pydantic models of the reply, ~2.5 ms of
CPU per request more (``benchmarks/model_cpu.py``, ``docs/benchmarks.md``). vLLM-specific fields
(``chat_template_kwargs``, guided decoding, ...) are merged into that body, as ``extra_body`` would.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import httpx2
import openai
import structlog
from openai import AsyncOpenAI, RequestOptions
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from .._version import __version__
from ..config import RoleConfig
from ..errors import ModelError, ModelReplyError, ModelUnavailableError
from ..records import ModelCall, RoleUsage
from ..secrets import Secrets
from .parsing import ReplyParseError
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

    def __init__(self, response: httpx2.Response) -> None:
        self.status = response.status_code
        self.retry_after_s = retry_after(response.headers)
        self.detail = _error_detail(response.content)
        super().__init__(f"HTTP {self.status}: {self.detail}")


class NoReplyError(Exception):
    """No HTTP reply came back: the connection was refused or dropped, or the deadline passed."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, NoReplyError):  # refused, dropped or timed out
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


# The SDK's telemetry headers (``X-Stainless-*``) are left out: an OpenAI-compatible server has no
# use for them and each one is parsed and normalised by httpx on every request. Retries are ours,
# so the SDK's retry count would always say 0 anyway.
_OMITTED_HEADERS = (
    "X-Stainless-Lang",
    "X-Stainless-Package-Version",
    "X-Stainless-OS",
    "X-Stainless-Arch",
    "X-Stainless-Runtime",
    "X-Stainless-Runtime-Version",
    "X-Stainless-Async",
    "X-Stainless-Retry-Count",
    "X-Stainless-Read-Timeout",
)


class Endpoint:
    """One server of a role, with its load: requests in flight and sessions stuck to it."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.in_flight = 0
        self.sessions = 0
        self.down_until = 0.0
        self.client: AsyncOpenAI | None = None  # made on first use, in the running event loop

    def load(self) -> tuple[bool, int, int]:
        return (time.monotonic() < self.down_until, self.in_flight, self.sessions)


class EndpointPool:
    """The servers of one role, shared by every session, over one pool of HTTP connections.

    ``http_client`` replaces the ``httpx2.AsyncClient`` under the SDK (tests pass one with an
    ``httpx2.MockTransport``); the caller closes it. By default the pool makes the SDK's
    aiohttp-backed client (proxies from ``HTTP(S)_PROXY``/``NO_PROXY``, TLS trust from the system),
    one per event loop, and closes it in ``aclose``.
    """

    def __init__(self, role: str, config: RoleConfig, http_client: httpx2.AsyncClient | None = None) -> None:
        urls = config.endpoints() if config.model else []
        self.role = role
        self.config = config
        self.endpoints = [Endpoint(url) for url in urls]
        self._given = http_client
        self._http: httpx2.AsyncClient | None = http_client
        self._loop: asyncio.AbstractEventLoop | None = None
        headers: dict[str, Any] = dict.fromkeys(_OMITTED_HEADERS, openai.omit)
        headers["Content-Type"] = "application/json"
        self.options: RequestOptions = {
            "headers": headers,
            "timeout": config.timeout_s,
            "max_retries": 0,
            "security": {"bearer_auth": True},
        }

    def client(self, endpoint: Endpoint) -> AsyncOpenAI:
        """The SDK client of ``endpoint`` (one per endpoint, shared by every session)."""
        if self._given is None and self._loop is not asyncio.get_running_loop():
            # The default client's connections belong to the loop they were made in; a new loop
            # (another asyncio.run: an Agent run twice without aclose) gets its own. The old
            # ones died with their loop.
            self._loop = asyncio.get_running_loop()
            self._http = openai.DefaultAioHttpClient(timeout=self.config.timeout_s)
            for e in self.endpoints:
                e.client = None
        client = endpoint.client
        if client is None:
            api_key = self.config.api_key or _default_api_key()
            if not (api_key.isascii() and api_key.isprintable()):  # would be refused, or split the header
                raise ModelError(
                    f"the {self.role} model's API key has a line break or a non-ASCII character; check the API key",
                    role=self.role,
                )
            client = endpoint.client = AsyncOpenAI(
                base_url=endpoint.base_url,
                api_key=api_key,
                max_retries=0,
                timeout=self.config.timeout_s,
                default_headers={"User-Agent": f"webagent/{__version__}"},
                http_client=self._http,
            )
        return client

    def pick(self, exclude: Endpoint | None = None) -> Endpoint:
        """The least-loaded endpoint (healthy first, then fewest requests in flight, then sessions)."""
        if not self.endpoints:
            raise ModelError(f"the {self.role} model has no base_url/model configured", role=self.role)
        candidates = [e for e in self.endpoints if e is not exclude] or self.endpoints
        return min(candidates, key=Endpoint.load)

    async def aclose(self) -> None:
        """Close the pool's own HTTP connections (it opens new ones if used again)."""
        http, loop = self._http, self._loop
        if self._given is None:
            self._http = self._loop = None
            for e in self.endpoints:
                e.client = None
        if http is None or http is self._given or http.is_closed:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # a client of a closed loop cannot be closed any more
            await http.aclose()


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
        client, options, timeout_s = self.pool.client(endpoint), self.pool.options, self.config.timeout_s

        async def post() -> bytes:
            try:
                async with asyncio.timeout(timeout_s):  # one deadline for the whole exchange
                    response = await client.post(
                        endpoint.url, cast_to=httpx2.Response, content=encoded, options=options
                    )
            except openai.APIStatusError as exc:
                raise HTTPStatusError(exc.response) from None
            except (openai.OpenAIError, httpx2.HTTPError, aiohttp.ClientError, OSError) as exc:
                raise _no_reply(exc, timeout_s) from None  # OSError includes the deadline's TimeoutError
            if response.status_code >= 300:  # a redirect not followed
                raise HTTPStatusError(response)
            return response.content

        start = time.perf_counter()
        endpoint.in_flight += 1
        try:
            first: HTTPStatusError | NoReplyError | None = None
            try:  # the first attempt outside tenacity: most requests need no retry machinery
                reply = await post()
            except (HTTPStatusError, NoReplyError) as exc:
                if not _retryable(exc):
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
        text, prompt_tokens, completion_tokens = _read_completion(reply)
        usage.calls += 1
        usage.prompt_tokens += prompt_tokens
        usage.completion_tokens += completion_tokens
        usage.latency_s += latency
        return Completion(text, prompt_tokens, completion_tokens, latency)

    async def _retry(self, post: Callable[[], Awaitable[bytes]], first: Exception, usage: RoleUsage) -> bytes:
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


def retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (delay-seconds or an HTTP date), or None."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    return parse_retry_after(headers.get("retry-after"), now=now)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delay-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _no_reply(exc: BaseException, timeout_s: float) -> NoReplyError:
    """What went wrong, from the innermost cause the SDK, httpx and aiohttp wrapped.

    The innermost cause decides: the SDK's aiohttp bridge reports a server that closed the
    connection as a connect timeout, for one.
    """
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and len(chain) < 10:
        chain.append(link)
        link = link.__cause__ or link.__context__
    os_error: OSError | None = None
    for cause in reversed(chain):
        if isinstance(cause, TimeoutError | httpx2.TimeoutException):
            return NoReplyError(f"no reply within {timeout_s:g} s", timeout=True)
        if isinstance(cause, aiohttp.ClientError):  # names the host and port, unlike its OSError
            return NoReplyError(_describe_aiohttp(cause))
        if isinstance(cause, OSError) and os_error is None:
            os_error = cause
    if os_error is not None:
        return NoReplyError(_describe_os_error(os_error))
    if isinstance(exc, openai.APITimeoutError):
        return NoReplyError(f"no reply within {timeout_s:g} s", timeout=True)
    innermost = chain[-1]
    text = " ".join(str(innermost).split())
    return NoReplyError(text or type(innermost).__name__)


def _describe_aiohttp(exc: aiohttp.ClientError) -> str:
    """A short reason: "connection refused (host:port)", "server disconnected", ..."""
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"TLS failed ({exc.host}:{exc.port}): {exc.os_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"{_describe_os_error(exc.os_error)} ({exc.host}:{exc.port})"
    if isinstance(exc, aiohttp.NonHttpUrlClientError | aiohttp.InvalidURL):
        return f"not an http(s) URL: {exc}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without a reply"
    if isinstance(exc, aiohttp.ClientResponseError) and exc.status == 400 and exc.message:
        return f"bad HTTP reply: {' '.join(exc.message.split())}"  # aiohttp could not parse the reply
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _describe_os_error(error: OSError) -> str:
    if isinstance(error, socket.gaierror):
        reason = f"cannot resolve the host: {error.strerror or error}"
    elif error.errno:
        reason = os.strerror(error.errno)
    else:
        reason = error.strerror or str(error) or type(error).__name__
    return reason.lower()


def _default_api_key() -> str:
    return os.environ.get("OPENAI_API_KEY") or "EMPTY"


def _short(exc: BaseException | str | None, limit: int = 200) -> str:
    if exc is None:
        return ""
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
