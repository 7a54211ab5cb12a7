"""Token ids and logprobs in the offline server's replies, in vLLM's shape, when a request asks.

vLLM's OpenAI-compatible server (0.10.2+) gives a chat completion's tokens when the request says
``"return_token_ids": true``: ``prompt_token_ids`` beside ``choices`` (the prompt as the model read
it: chat template and image tokens included) and ``choices[0].token_ids`` (the completion, its end
token included). ``"logprobs": true`` adds ``choices[0].logprobs.content``: one entry per completion
token (``token``, ``logprob``, ``bytes``, ``top_logprobs``), its ``token`` written ``token_id:N`` with
``"return_tokens_as_token_ids": true``. The usage then counts exactly those tokens.

Here the tokens are the simulated prefix cache's (:mod:`webagent.testing.prefixcache`: ~4
characters a token, an image its family's number of tokens), each mapped to a stable id (an image's
tokens all to one placeholder id, as a real processor's are), and each logprob is drawn from the
token's id, so that the same reply has the same logprobs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

__all__ = ["IMAGE_TOKEN_ID", "add_tokens", "token_id", "token_logprob", "wants_tokens"]

#: The id of every image token (Qwen2-VL's ``<|image_pad|>``).
IMAGE_TOKEN_ID = 151_655
_VOCAB = 151_000
_SPECIAL_BASE = 151_643
_SPECIALS = 600


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=4).digest(), "big")


def _text(token: Hashable) -> str:
    return token if isinstance(token, str) else ""


def token_id(token: Hashable) -> int:
    """The id of a simulated token: an image's tokens one placeholder, the chat template's markers
    (``<|user|>``) ids of their own above the text's, a text token a stable id below them."""
    if not isinstance(token, str):
        return IMAGE_TOKEN_ID
    if token.startswith("<|") and token.endswith("|>"):
        return _SPECIAL_BASE + 13 + _digest(token) % _SPECIALS
    return 100 + _digest(token) % (_VOCAB - 100)


def token_logprob(token: Hashable) -> float:
    """A completion token's log-probability, the same for the same token (in [-3, 0])."""
    return -round((_digest(repr(token)) % 3001) / 1000, 3)


def wants_tokens(body: Mapping[str, Any]) -> bool:
    """Whether a request asks for its tokens or its completion's logprobs."""
    return body.get("return_token_ids") is True or body.get("logprobs") is True


def add_tokens(
    reply: dict[str, Any], body: Mapping[str, Any], prompt: Sequence[Hashable], completion: Sequence[Hashable]
) -> dict[str, Any]:
    """``reply`` (a chat.completion) with what ``body`` asks of its tokens: ``prompt`` and
    ``completion`` are the simulated tokens of the request and of the reply; its usage counts them."""
    choice = reply["choices"][0]
    ids = [token_id(t) for t in completion]
    if body.get("return_token_ids") is True:
        reply["prompt_token_ids"] = [token_id(t) for t in prompt]
        choice["token_ids"] = ids
    if body.get("logprobs") is True:
        as_ids = body.get("return_tokens_as_token_ids") is True
        choice["logprobs"] = {
            "content": [
                {
                    "token": f"token_id:{i}" if as_ids else _text(t),
                    "logprob": token_logprob(t),
                    "bytes": list(_text(t).encode()),
                    "top_logprobs": [],
                }
                for t, i in zip(completion, ids, strict=True)
            ]
        }
    usage = reply["usage"]
    usage["completion_tokens"] = len(ids)
    usage["total_tokens"] = usage["prompt_tokens"] + len(ids)
    return reply
