"""Image processors: how a screenshot becomes prompt tokens for a model family.

What a screenshot costs is decided by the server's image processor, not by the pixels sent: it
resizes every image (a Qwen-VL processor to multiples of its patch within its pixel limits, the
Nemotron processor to its tile grid). Two kinds exist among the registered families:

- :class:`QwenPatches` (Qwen2.5-VL, Qwen3-VL, Qwen3.5): the image is resized to multiples of
  ``factor`` pixels (``smart_resize``) and costs one token per ``factor`` x ``factor`` patch:
  ``ceil(w/factor) * ceil(h/factor)``. With 28-px patches 1260x784 costs 1,260 tokens; with
  32-px patches 1280x800 costs 1,000.
- :class:`NemotronTiles` (Nemotron-Nano-VL, InternVL-style tiling): the image is resized to the
  grid of at most ``max_num_tiles`` 512-px tiles whose aspect ratio is closest to the image's,
  each tile costs 256 tokens, and a 512x512 thumbnail of the whole image adds another 256 when
  there is more than one tile. vLLM's default is 12 tiles, which gives a 1260x784 screenshot a 3x2
  grid: 7 x 256 = 1,792 tokens. With ``max_num_tiles = 2`` (sent per request as
  ``mm_processor_kwargs``), the grid is 2x1: 3 x 256 = 768.

So the policy is sent the screenshot its grounding needs (one capture per step) and its family
sets the processor's limit instead: ``max_num_tiles`` for a tiling processor. A second capture at
a policy-specific size was measured at +30 ms of CPU per click step for no tokens saved
(docs/benchmarks-history.md, 2026-11-26, "Prompt tokens per step").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..images import ResizeRule, smart_resize

__all__ = [
    "AGENT_MAX_NUM_TILES",
    "DEFAULT_MAX_NUM_TILES",
    "TILE",
    "TILE_TOKENS",
    "ImageProcessor",
    "NemotronTiles",
    "QwenPatches",
    "tile_grid",
]

#: Nemotron-Nano-VL's tile side in pixels, and the tokens one tile costs.
TILE = 512
TILE_TOKENS = 256
#: vLLM's tile limit for Nemotron-Nano-VL when the request does not set one.
DEFAULT_MAX_NUM_TILES = 12
#: The agent's tile limit for a tiling family (``[policy] max_num_tiles``): a 2x1 grid for a
#: landscape viewport, 768 tokens a screenshot.
AGENT_MAX_NUM_TILES = 2


@dataclass(frozen=True, slots=True)
class QwenPatches:
    """A Qwen-VL processor: sides resized to multiples of ``rule.factor`` (the pixels of one image
    token: patch 14 or 16, merged 2x2), the area kept within the rule's pixel limits."""

    rule: ResizeRule

    @property
    def tiles(self) -> bool:
        return False

    def tokens(self, width: int, height: int, max_num_tiles: int = DEFAULT_MAX_NUM_TILES) -> int:
        h, w = smart_resize(height, width, self.rule)
        return math.ceil(w / self.rule.factor) * math.ceil(h / self.rule.factor)


@dataclass(frozen=True, slots=True)
class NemotronTiles:
    """An InternVL-style tiling processor (its tile limit is sent per request as
    ``mm_processor_kwargs``; the agent's is ``[policy] max_num_tiles``)."""

    @property
    def tiles(self) -> bool:
        return True

    def tokens(self, width: int, height: int, max_num_tiles: int = DEFAULT_MAX_NUM_TILES) -> int:
        cols, rows = tile_grid(width, height, max_num_tiles)
        tiles = cols * rows
        return TILE_TOKENS * (tiles + 1 if tiles > 1 else 1)


ImageProcessor = QwenPatches | NemotronTiles


def tile_grid(width: int, height: int, max_num_tiles: int) -> tuple[int, int]:
    """``(columns, rows)`` of the tile grid an InternVL-style processor picks for an image.

    Every grid of at most ``max_num_tiles`` tiles is a candidate; the one whose aspect ratio is
    closest to the image's wins, and on a tie the larger grid when the image has more than half its
    pixels (``find_closest_aspect_ratio`` of InternVL / vLLM's ``nano_nemotron_vl``).
    """
    if width <= 0 or height <= 0:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if max_num_tiles < 1:
        raise ValueError(f"max_num_tiles must be at least 1, got {max_num_tiles}")
    ratios = sorted(
        {(i, j) for n in range(1, max_num_tiles + 1) for i in range(1, n + 1) for j in range(1, n + 1) if i * j <= n},
        key=lambda r: r[0] * r[1],
    )
    aspect = width / height
    best, best_diff = (1, 1), math.inf
    for cols, rows in ratios:
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and width * height > 0.5 * TILE * TILE * cols * rows:
            best = (cols, rows)
    return best
