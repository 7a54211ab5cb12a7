"""A simulated vLLM automatic prefix cache, so the offline server can say what a GPU would prefill.

vLLM keeps the KV cache in blocks of ``block_size`` tokens (16) and caches each full block under a
hash of its tokens chained to the hash of the block before, so a block is reused only when every
token before it is the same too; an image's tokens are bound to the image's content (or to the
``uuid`` the request gives it). A request reuses its longest run of cached leading blocks, never
all of its tokens (the last one is always computed), and every full block of the prompt and of the
reply is cached afterwards; the least recently used blocks are evicted past ``capacity`` blocks,
a request's tail before its head (the order vLLM frees them in).
The counters are vLLM's own: ``vllm:prefix_cache_queries_total`` (prompt tokens looked up) and
``vllm:prefix_cache_hits_total`` (tokens served from the cache).

The token stream is an approximation of a chat template (documented in docs/offline-server.md):
each message is a role marker, its content and an end marker; text is one token per 4 characters
(each token bound to its 4 characters, so a change anywhere changes the tokens from there on); an
image is its family's :meth:`~webagent.families.ModelFamily.image_tokens` tokens, each bound to the image's
identity; the request's ``tools`` are rendered into the system turn, after its text (where Qwen's
templates put them; vLLM keeps them in the prompt even under ``tool_choice: "none"`` unless served
with ``--exclude-tools-when-tool-choice-none``), so a request offering other tools shares nothing
after the system prompt; the prompt ends with the assistant marker, which the reply then continues.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from webagent.families import DEFAULT_MAX_NUM_TILES, DEFAULT_PROFILE, ModelFamily
from webagent.families import family_of as _family_of
from webagent.testing.contracts import calls_text
from webagent.testing.images import image_size

__all__ = [
    "BLOCK_SIZE",
    "CHARS_PER_TOKEN",
    "CacheLookup",
    "ImageRef",
    "PrefillCounts",
    "PrefixCache",
    "family_of",
    "image_refs",
    "prompt_tokens",
    "reply_tokens",
    "request_tokens",
]

BLOCK_SIZE = 16
#: Blocks kept by default: 1M tokens, about what an H100 holds for a 7-12B model beside its weights.
DEFAULT_CAPACITY_BLOCKS = 65_536
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class ImageRef:
    """An image of a request: its identity (content digest or uuid) and pixel size."""

    key: str
    width: int
    height: int


@dataclass(frozen=True, slots=True)
class CacheLookup:
    """One request's prompt against the cache."""

    prompt_tokens: int
    cached_tokens: int


def family_of(model: str, default: str = DEFAULT_PROFILE) -> ModelFamily:
    """The image-token family of a model name (``default`` when the name does not tell)."""
    family = _family_of(model, default)
    assert family is not None
    return family


def image_refs(messages: Sequence[dict[str, Any]], digests: Sequence[str]) -> list[ImageRef]:
    """The image parts of ``messages`` in order, each bound to its ``uuid`` when it has one, else to
    its ``data:`` URL's digest (``digests``: those of the body's data URLs, in order)."""
    refs: list[ImageRef] = []
    pending = iter(digests)
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if not (isinstance(part, dict) and part.get("type") == "image_url"):
                continue
            image = part.get("image_url")
            url = str(image.get("url", "")) if isinstance(image, dict) else str(image or "")
            digest = next(pending, url) if url.startswith("data:image/") else url
            width, height = image_size(url) or (0, 0)
            uuid = part.get("uuid")
            refs.append(ImageRef(str(uuid) if uuid else digest, width, height))
    return refs


@lru_cache(maxsize=1024)
def _text_tokens(text: str) -> tuple[str, ...]:
    """A text's tokens, made once for a text that comes again (a system prompt, the tools)."""
    return tuple(text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN))


@lru_cache(maxsize=512)
def _image_tokens(key: str, count: int) -> tuple[tuple[str, int], ...]:
    """An image's tokens, kept for the next requests of its session (the localizer's, the policy's
    history): the server's CPU shares the agent's cores in benchmarks. At most 512 images, about
    92 bytes a token: 60 MB of Holo1.5-sized screenshots (1,260 tokens), 300 MB of Holotron's."""
    return tuple((key, i) for i in range(count))


def prompt_tokens(
    messages: Sequence[dict[str, Any]],
    images: Sequence[ImageRef],
    *,
    family: ModelFamily,
    max_num_tiles: int = DEFAULT_MAX_NUM_TILES,
    tools: Sequence[Any] = (),
) -> list[Hashable]:
    """The simulated token stream of a chat request (``images``: its image parts, in order;
    ``tools``: the tools it offers, rendered at the end of its system turn)."""
    tokens: list[Hashable] = []
    pending = iter(images)
    offered: Sequence[Hashable] = _text_tokens(json.dumps(list(tools), separators=(",", ":"))) if tools else ()
    if offered and (not messages or messages[0].get("role") != "system"):
        tokens += ["<|system|>", *offered, "<|end|>"]
        offered = ()
    for message in messages:
        tokens.append(f"<|{message.get('role', 'user')}|>")
        content = message.get("content")
        if isinstance(content, str):
            tokens += _text_tokens(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text":
                    tokens += _text_tokens(str(part.get("text", "")))
                elif part.get("type") == "image_url":
                    image = next(pending, None)
                    if image is not None and image.width > 0 and image.height > 0:
                        n = family.image_tokens(image.width, image.height, max_num_tiles=max_num_tiles)
                        tokens += _image_tokens(image.key, n)
        tokens += _text_tokens(calls_text(message.get("tool_calls")))
        tokens += offered  # the system turn's (the first message), then nothing more
        offered = ()
        tokens.append("<|end|>")
    tokens.append("<|assistant|>")
    return tokens


def request_tokens(
    body: Mapping[str, Any], messages: Sequence[dict[str, Any]], digests: Sequence[str], family: ModelFamily
) -> list[Hashable]:
    """The token stream of a chat request's body (``digests``: its data URLs', in order), with the
    tile limit its ``mm_processor_kwargs`` set (vLLM's default, 12, when none) and its ``tools``."""
    kwargs = body.get("mm_processor_kwargs")
    tools = body.get("tools")
    tiles = kwargs.get("max_num_tiles") if isinstance(kwargs, dict) else None
    if not isinstance(tiles, int) or isinstance(tiles, bool) or tiles <= 0:
        tiles = DEFAULT_MAX_NUM_TILES
    return prompt_tokens(
        messages,
        image_refs(messages, digests),
        family=family,
        max_num_tiles=tiles,
        tools=tools if isinstance(tools, list) else (),
    )


def reply_tokens(*texts: str) -> list[Hashable]:
    """The tokens a reply adds after the prompt (its texts: reasoning, content, tool calls; then the
    end marker), each text tokenized as the prompt of a later request renders it."""
    return [*(token for text in texts for token in _text_tokens(text)), "<|end|>"]


class PrefixCache:
    """Chained block hashes in an LRU of ``capacity`` blocks.

    ``checkpoints``: a hybrid Mamba model's cache in vLLM's ``align`` mode, where a hit needs the
    model's recurrent state as well as the attention blocks, and that state is kept only at one
    block boundary per request (the last before its prompt ends; ``block_size`` is then the
    enlarged attention block, several hundred tokens): a request resumes from the longest such
    checkpoint that its prompt starts with, and the reply is not cached.
    """

    def __init__(
        self, *, block_size: int = BLOCK_SIZE, capacity: int = DEFAULT_CAPACITY_BLOCKS, checkpoints: bool = False
    ) -> None:
        if block_size < 1 or capacity < 1:
            raise ValueError(f"the block size and the capacity must be at least 1, got {block_size} and {capacity}")
        self.block_size = block_size
        self.capacity = capacity
        self.checkpoints = checkpoints
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def clear(self) -> None:
        self._blocks.clear()

    def _hashes(self, tokens: Sequence[Hashable], known: Sequence[int] = ()) -> list[int]:
        """The chained hash of each full block of ``tokens`` (``known``: those of its first blocks,
        already computed)."""
        size, out = self.block_size, list(known)
        parent = out[-1] if out else 0
        whole = tuple(tokens)  # a tuple's slices are tuples: one copy in all, not two a block
        for start in range(len(out) * size, len(whole) - size + 1, size):
            parent = hash((parent, whole[start : start + size]))
            out.append(parent)
        return out

    def lookup(self, tokens: Sequence[Hashable]) -> CacheLookup:
        """How many of the prompt's leading tokens the cache serves (it then caches the prompt)."""
        return self._lookup(tokens)[0]

    def prefill(self, prompt: Sequence[Hashable], reply: Sequence[Hashable]) -> CacheLookup:
        """``lookup(prompt)``, then ``store`` the prompt followed by its reply, hashing the prompt once."""
        found, hashes = self._lookup(prompt)
        if not self.checkpoints:
            self._insert(self._hashes([*prompt, *reply], hashes))
        return found

    def _lookup(self, tokens: Sequence[Hashable]) -> tuple[CacheLookup, list[int]]:
        hashes = self._hashes(tokens)
        usable = (len(tokens) - 1) // self.block_size  # the last token is always computed
        if self.checkpoints:
            return self._resume(tokens, hashes, usable), hashes
        hit = 0
        for h in hashes[:usable]:
            if h not in self._blocks:
                break
            hit += 1
        self._insert(hashes)
        return CacheLookup(len(tokens), hit * self.block_size), hashes

    def _resume(self, tokens: Sequence[Hashable], hashes: list[int], usable: int) -> CacheLookup:
        hit = next((i + 1 for i in range(usable - 1, -1, -1) if hashes[i] in self._blocks), 0)
        if hit:
            self._blocks.move_to_end(hashes[hit - 1])
        self._insert(hashes[-1:])  # the prompt's checkpoint: its last full block
        return CacheLookup(len(tokens), hit * self.block_size)

    def store(self, tokens: Sequence[Hashable]) -> None:
        """Cache every full block of ``tokens`` (a prompt followed by its reply; nothing with
        ``checkpoints``, where only the prompt's checkpoint is kept)."""
        if not self.checkpoints:
            self._insert(self._hashes(tokens))

    def _insert(self, hashes: Sequence[int]) -> None:
        """Cache (or refresh) a request's blocks, its last block first: vLLM frees a finished
        request's blocks in reverse order, so under pressure a conversation loses its tail before
        its head, and a shared head (the system prompt) outlives every tail."""
        blocks = self._blocks
        for h in reversed(hashes):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)


#: vLLM's counters that ``/metrics`` reports (what ``webagent batch --server-metrics`` reads).
VLLM_COUNTERS = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
)


class PrefillCounts:
    """vLLM's counters over every request, and per role the requests, prompt tokens, cached tokens,
    the largest prompt and the text tokens of the turns the requests added."""

    def __init__(self, roles: Sequence[str]) -> None:
        self.metrics: dict[str, int] = dict.fromkeys(VLLM_COUNTERS, 0)
        self.per_role: dict[str, dict[str, int]] = {
            role: dict.fromkeys(("requests", "prompt_tokens", "cached_tokens", "max_prompt_tokens", "turn_tokens"), 0)
            for role in roles
        }

    def count(self, role: str, lookup: CacheLookup, completion_tokens: int, turn_tokens: int = 0) -> None:
        """Count one request (``turn_tokens``: the text tokens of the turn it adds)."""
        metrics = self.metrics
        metrics["vllm:prompt_tokens_total"] += lookup.prompt_tokens
        metrics["vllm:generation_tokens_total"] += completion_tokens
        metrics["vllm:prefix_cache_queries_total"] += lookup.prompt_tokens
        metrics["vllm:prefix_cache_hits_total"] += lookup.cached_tokens
        stats = self.per_role[role]
        stats["requests"] += 1
        stats["prompt_tokens"] += lookup.prompt_tokens
        stats["cached_tokens"] += lookup.cached_tokens
        stats["max_prompt_tokens"] = max(stats["max_prompt_tokens"], lookup.prompt_tokens)
        stats["turn_tokens"] += turn_tokens
