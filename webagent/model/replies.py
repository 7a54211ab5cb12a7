"""What comes back from a model server, read for the client: a completion's text and tokens, an
error status with its detail and ``Retry-After``, or no reply at all and why (the innermost cause
of what the SDK, httpx and aiohttp raised); and which of those a retry may cure."""

from __future__ import annotations

import email.utils
import json
import math
import os
import socket
import time
from collections.abc import Mapping

import aiohttp
import httpx2
import openai
from tenacity import RetryCallState

from ..guard.secrets import shorten, well_formed
from ..records import TokenRecord, ToolCall
from .parsing import well_formed_json

__all__ = [
    "RETRY_BASE_S",
    "RETRY_MAX_WAIT_S",
    "HTTPStatusError",
    "NoReplyError",
    "Reply",
    "error_detail",
    "no_reply",
    "parse_retry_after",
    "read_completion",
    "read_tokens",
    "retry_after",
    "retry_wait",
    "retryable",
    "short",
]

RETRY_MAX_WAIT_S = 30.0
RETRY_BASE_S = 0.5


class HTTPStatusError(Exception):
    """A reply with an error status (inside the client; callers get a ModelError)."""

    def __init__(self, status: int, headers: Mapping[str, str], content: bytes) -> None:
        self.status = status
        self.retry_after_s = retry_after(headers)
        self.detail = error_detail(content)
        super().__init__(f"HTTP {self.status}: {self.detail}")


class NoReplyError(Exception):
    """No HTTP reply came back: the connection was refused or dropped, or the deadline passed."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, NoReplyError):  # refused, dropped or timed out
        return True
    if isinstance(exc, HTTPStatusError):
        return exc.status in (408, 409, 429) or exc.status >= 500
    return False


def retry_wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    hinted = exc.retry_after_s if isinstance(exc, HTTPStatusError) else None
    if hinted is not None:
        return min(hinted, RETRY_MAX_WAIT_S)
    backoff: float = RETRY_BASE_S * 2.0 ** (state.attempt_number - 1)
    return min(backoff, RETRY_MAX_WAIT_S)


class Reply(str):
    """A reply's text (``message.content``) with its native tool calls (``message.tool_calls``).

    The reasoning a server returns beside the content (``reasoning``, ``reasoning_content``) is not
    kept: the chat templates of the models that reason drop it from later turns, and what the model
    must remember goes through its content."""

    __slots__ = ("tool_calls",)
    tool_calls: tuple[ToolCall, ...]

    def __new__(cls, text: str, tool_calls: tuple[ToolCall, ...] = ()) -> Reply:
        reply = super().__new__(cls, text)
        reply.tool_calls = tool_calls
        return reply


def read_completion(raw: bytes) -> tuple[Reply, int, int, int]:
    """The reply (text and tool calls), prompt and completion tokens, and the prompt tokens served
    from the server's prefix cache (``usage.prompt_tokens_details.cached_tokens``; 0 when not
    reported), from a chat.completion body (odd bodies give empty text)."""
    try:
        data = json.loads(raw)
        message = data["choices"][0]["message"]
        text = message.get("content") or ""
        calls = _tool_calls(message.get("tool_calls"))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return Reply(shorten(raw.decode("utf-8", "replace"), 2000) if isinstance(raw, bytes) else ""), 0, 0, 0
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return (
        Reply(well_formed(str(text)), calls),  # a JSON escape can make a lone surrogate
        _count(usage.get("prompt_tokens")),
        _count(usage.get("completion_tokens")),
        _count(cached),
    )


#: What a request adds to be given its tokens by vLLM (0.10.2+): the prompt's and the completion's
#: ids, and the log-probability of each sampled token (as ``token_id:N`` strings, so the ids can be
#: read from the logprobs too where ``token_ids`` is missing).
TOKEN_FIELDS = {"return_token_ids": True, "logprobs": True, "return_tokens_as_token_ids": True}


def read_tokens(raw: bytes) -> TokenRecord:
    """The tokens a chat.completion body gives (vLLM's ``prompt_token_ids``, ``choices[0].token_ids``
    and ``choices[0].logprobs.content[].logprob``); empty lists for what it lacks."""
    try:
        data = json.loads(raw)
        choice = data["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        return TokenRecord()
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    entries = [e for e in content if isinstance(e, dict)] if isinstance(content, list) else []
    ids = _ids(choice.get("token_ids"))
    if not ids and entries:  # an older vLLM: the ids only in the logprobs' "token_id:N" tokens
        ids = _ids([_token_id(e.get("token")) for e in entries])
    values = [e.get("logprob") for e in entries]
    numbers = [float(v) for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    return TokenRecord(
        prompt_token_ids=_ids(data.get("prompt_token_ids")),
        token_ids=ids,
        logprobs=numbers if len(numbers) == len(values) else [],
    )


def _token_id(token: object) -> int | None:
    if isinstance(token, str) and token.startswith("token_id:") and token[9:].isdigit():
        return int(token[9:])
    return None


def _ids(value: object) -> list[int]:
    """A list of token ids, or [] for anything else (one bad item spoils it: ids must line up)."""
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return []
    return list(value)


def _tool_calls(value: object) -> tuple[ToolCall, ...]:
    """The function calls of ``message.tool_calls`` (others, and malformed entries, left out)."""
    if not isinstance(value, list):
        return ()
    calls: list[ToolCall] = []
    for index, item in enumerate(value):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        text = _arguments(function.get("arguments"))
        call_id = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else f"call_{index}"
        calls.append(ToolCall(id=call_id, name=well_formed(function["name"]), arguments=text))
    return tuple(calls)


def _arguments(value: object) -> str:
    """A tool call's arguments as JSON text UTF-8 can carry, as the model wrote them where they
    hold no lone surrogate (``parsing.well_formed_json``); arguments given as an object are
    written as JSON."""
    if isinstance(value, str):
        return well_formed_json(value)
    return json.dumps(value if value is not None else {})  # ASCII: a lone surrogate escaped, and read back as U+FFFD


def _count(value: object) -> int:
    """A token count as reported; 0 for a missing, negative or non-numeric one."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0
    return max(int(value), 0)


def error_detail(body: bytes) -> str:
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


def no_reply(exc: BaseException, timeout_s: float) -> NoReplyError:
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
    if isinstance(exc, aiohttp.ClientPayloadError):  # a body cut short, or one that does not decode
        return f"the reply's body could not be read: {' '.join(str(exc).split())}"
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


def short(exc: BaseException | str | None, limit: int = 200) -> str:
    if exc is None:
        return ""
    return shorten(" ".join(str(exc).split()), limit)
