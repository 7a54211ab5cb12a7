"""Model families: how many tokens a screenshot costs each one, and what size to send it at.

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

The policy's screenshots are sized per family (:func:`policy_frame`): the Holo families get the
size their processor keeps unchanged; Holotron gets the whole viewport scaled down to its tile
grid's size (the processor stretches every image to its grid anyway, and the thumbnail shows the
whole page), so the policy sees all of the page and the server is sent no pixels it throws away.
The localizer keeps its own profile's exact pixels.
"""

from __future__ import annotations

import math
from typing import Any, Literal, get_args

from .images import Frame, ResizeRule, frame_for

__all__ = [
    "DEFAULT_MAX_NUM_TILES",
    "FAMILIES",
    "HOLOTRON_MAX_NUM_TILES",
    "TILE",
    "TILE_TOKENS",
    "Family",
    "image_tokens",
    "policy_extra_body",
    "policy_frame",
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

#: Pixels per image token of the Qwen-VL families (patch 14 or 16, merged 2x2).
_PATCH = {"holo1": 28, "holo1.5": 28, "holo2": 32}


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
    """The prompt tokens one ``width`` x ``height`` image costs a model of ``family`` (as sent:
    a Holo image sized by ``smart_resize`` is kept as it is)."""
    if family == "holotron":
        cols, rows = tile_grid(width, height, max_num_tiles)
        tiles = cols * rows
        return TILE_TOKENS * (tiles + 1 if tiles > 1 else 1)
    patch = _PATCH[family]
    return math.ceil(width / patch) * math.ceil(height / patch)


def policy_frame(
    family: Family, viewport_width: int, viewport_height: int, *, rule: ResizeRule, max_num_tiles: int
) -> Frame:
    """The frame of the policy's screenshots for ``family`` (``rule``: the Holo family's resize rule).

    Holotron: the whole viewport at one scale, shrunk until it covers the tile grid's pixels in one
    direction and reaches them in the other (never enlarged: the server upscales for free); the
    processor then resizes it to the grid. A 1280x800 viewport with 2 tiles is sent as 1024x640
    and tiled as 1024x512 plus a thumbnail: 768 tokens, the page squeezed 0.8 vertically and nothing
    of it cut off.
    """
    if family != "holotron":
        return frame_for(viewport_width, viewport_height, rule)
    cols, rows = tile_grid(viewport_width, viewport_height, max_num_tiles)
    scale = min(1.0, max(TILE * cols / viewport_width, TILE * rows / viewport_height))
    width, height = round(viewport_width * scale), round(viewport_height * scale)
    return Frame(viewport_width, viewport_height, width, height)


def policy_extra_body(family: Family, max_num_tiles: int) -> dict[str, Any] | None:
    """What a policy request of ``family`` adds to its body (None: nothing)."""
    match family:
        case "holotron":
            return {"mm_processor_kwargs": {"max_num_tiles": max_num_tiles}}
        case "holo2":
            # Holo2 thinks before it answers unless told not to; the policy's reply is a JSON action.
            return {"chat_template_kwargs": {"thinking": False}}
        case "holo1" | "holo1.5":
            return None
