"""Model families: how many tokens a screenshot costs each one, and what a policy request asks.

A family is the image processor behind a model, which decides how a screenshot becomes prompt
tokens (and so what a step costs the GPU):

- ``holo1`` / ``holo1.5`` (Qwen2.5-VL): the image is resized to multiples of 28 px
  (``smart_resize``) and costs one token per 28x28 patch: ``ceil(w/28) * ceil(h/28)``;
  1260x784 costs 1,260 tokens.
- ``holo2`` (Qwen3-VL): multiples of 32 px, one token per 32x32 patch; 1280x800 costs 1,000.
- ``holotron`` (Holotron-12B, on Nemotron-Nano-VL's processor, InternVL-style tiling): the image
  is resized to the grid of at most ``max_num_tiles`` 512-px tiles whose aspect ratio is closest
  to the image's, each tile costs 256 tokens, and a 512x512 thumbnail of the whole image adds
  another 256 when there is more than one tile. vLLM's default is 12 tiles, which gives a
  1260x784 screenshot a 3x2 grid: 7 x 256 = 1,792 tokens. With ``max_num_tiles = 2`` (sent per
  request as ``mm_processor_kwargs``), the grid is 2x1: 3 x 256 = 768.

What a screenshot costs is decided by the server's image processor, not by the pixels sent: it
resizes every image (a Qwen-VL processor to multiples of its patch within its pixel limits, the
Nemotron processor to its tile grid). So the policy is sent the screenshot the localizer needs
(its profile's exact pixels, one capture per step) and its family sets the processor's limit
instead: ``max_num_tiles`` for Holotron (:func:`family_extra_body`). A second capture at a
policy-specific size was measured at +30 ms of CPU per click step for no tokens saved
(docs/benchmarks.md).
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

from .images import ResizeRule, smart_resize

__all__ = [
    "DEFAULT_MAX_NUM_TILES",
    "FAMILIES",
    "FAMILY_RULES",
    "HOLOTRON_MAX_NUM_TILES",
    "TILE",
    "TILE_TOKENS",
    "Family",
    "family_extra_body",
    "image_tokens",
    "policy_extra_body",
    "tile_grid",
]

Family = Literal["holo1", "holo1.5", "holo2", "holotron"]
FAMILIES: tuple[Family, ...] = get_args(Family)

#: Nemotron-Nano-VL's tile side in pixels, and the tokens one tile costs.
TILE = 512
TILE_TOKENS = 256
#: vLLM's tile limit for Nemotron-Nano-VL when the request does not set one.
DEFAULT_MAX_NUM_TILES = 12
#: The agent's tile limit for a Holotron policy (``[policy] max_num_tiles``): a 2x1 grid for a
#: landscape viewport, 768 tokens a screenshot.
HOLOTRON_MAX_NUM_TILES = 2

#: The image processor's resize rule of each Qwen-VL family (the localizer profiles'):
#: sides in multiples of ``factor`` (the pixels of one image token: patch 14 or 16, merged 2x2).
FAMILY_RULES: dict[str, ResizeRule] = {
    "holo1": ResizeRule(factor=28, min_pixels=3136, max_pixels=1_003_520),
    "holo1.5": ResizeRule(factor=28, min_pixels=3136, max_pixels=12_845_056),
    "holo2": ResizeRule(factor=32, min_pixels=65_536, max_pixels=16_777_216),
}


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


def image_tokens(family: Family, width: int, height: int, *, max_num_tiles: int = DEFAULT_MAX_NUM_TILES) -> int:
    """The prompt tokens one ``width`` x ``height`` image costs a model of ``family``: after the
    processor's resize, ``ceil(w/28)*ceil(h/28)`` (Qwen2.5-VL) or ``ceil(w/32)*ceil(h/32)``
    (Qwen3-VL); 256 per tile (+ 256 for the thumbnail of more than one) for Nemotron-Nano-VL."""
    if family == "holotron":
        cols, rows = tile_grid(width, height, max_num_tiles)
        tiles = cols * rows
        return TILE_TOKENS * (tiles + 1 if tiles > 1 else 1)
    rule = FAMILY_RULES[family]
    h, w = smart_resize(height, width, rule)
    return math.ceil(w / rule.factor) * math.ceil(h / rule.factor)


def family_extra_body(family: Family, max_num_tiles: int) -> dict[str, Any] | None:
    """What a request to a model of ``family`` (the policy's, the validator's) adds to its body (None: nothing)."""
    match family:
        case "holotron":
            return {"mm_processor_kwargs": {"max_num_tiles": max_num_tiles}}
        case "holo2":
            # Holo2 thinks before it answers unless told not to; the replies are JSON objects.
            return {"chat_template_kwargs": {"thinking": False}}
        case "holo1" | "holo1.5":
            return None


#: The name this had when only the policy sent a family's fields.
policy_extra_body = family_extra_body
