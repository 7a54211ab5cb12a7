"""Model families: one registry, read by every part that speaks to a model.

Each family (:class:`ModelFamily`, registered in :mod:`webagent.families.registry`) says how its
image processor turns a screenshot into tokens, what its requests carry (reasoning switches, tile
limits, the field that carries a schema), how its policy replies (JSON of which shape, or native
tool calls) and in which coordinate space, whether it localizes elements and how, and how it is
served. The names of the families are spelled out in the registry only; everything else looks them
up here (``tests/test_families.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .contracts import (
    TOOL_ACTIONS,
    TOOL_NAMES,
    ContextMode,
    Grounding,
    LocalizerContract,
    LocalizerReply,
    ModelFamily,
    Output,
    PointSpace,
    PolicyContract,
    ReplyShape,
    SchemaField,
    Serving,
    ValidatorContext,
)
from .processors import (
    AGENT_MAX_NUM_TILES,
    DEFAULT_MAX_NUM_TILES,
    TILE,
    TILE_TOKENS,
    ImageProcessor,
    NemotronTiles,
    QwenPatches,
    tile_grid,
)
from .registry import DEFAULT_PROFILE, GENERIC_POLICY, REGISTRY

__all__ = [
    "AGENT_MAX_NUM_TILES",
    "DEFAULT_MAX_NUM_TILES",
    "DEFAULT_PROFILE",
    "FAMILIES",
    "GENERIC_POLICY",
    "GROUNDING_FAMILIES",
    "PROFILES",
    "TILE",
    "TILE_TOKENS",
    "TOOL_ACTIONS",
    "TOOL_NAMES",
    "ContextMode",
    "Grounding",
    "ImageProcessor",
    "LocalizerContract",
    "LocalizerReply",
    "ModelFamily",
    "NemotronTiles",
    "Output",
    "PointSpace",
    "PolicyContract",
    "QwenPatches",
    "ReplyShape",
    "SchemaField",
    "Serving",
    "ValidatorContext",
    "check_family",
    "check_profile",
    "family_of",
    "get_family",
    "image_tokens",
    "tile_grid",
]

#: Every registered family by name, in the registry's order.
FAMILIES: Mapping[str, ModelFamily] = {f.name: f for f in REGISTRY}
#: The families with an element-localization contract: the localizer profiles.
PROFILES: tuple[str, ...] = tuple(f.name for f in REGISTRY if f.localizer is not None)
#: The families whose policy can put its own clicks on the screenshot (``grounding = "policy"``).
GROUNDING_FAMILIES: tuple[str, ...] = tuple(f.name for f in REGISTRY if f.policy.point is not None)


def get_family(name: str) -> ModelFamily:
    """The family called ``name``; a ValueError that lists the known ones otherwise."""
    family = FAMILIES.get(name)
    if family is None:
        raise ValueError(f"not a model family: one of {', '.join(FAMILIES)} (got {name!r})")
    return family


def check_family(value: Any) -> Any:
    """A pydantic validator: ``value`` is None or a registered family's name."""
    if value is not None:
        get_family(value)
    return value


def check_profile(value: Any) -> Any:
    """A pydantic validator: ``value`` is a family with an element-localization contract."""
    if value not in PROFILES:
        raise ValueError(f"not a localizer profile: one of {', '.join(PROFILES)} (got {value!r})")
    return value


def family_of(model: str, default: str | None = None) -> ModelFamily | None:
    """The family a model name tells (its longest registered fragment), else ``default``'s."""
    name = model.lower()
    hits = [(len(fragment), f) for f in REGISTRY for fragment in f.match if fragment in name]
    if hits:
        return max(hits, key=lambda hit: hit[0])[1]
    return FAMILIES[default] if default is not None else None


def image_tokens(family: str, width: int, height: int, *, max_num_tiles: int = DEFAULT_MAX_NUM_TILES) -> int:
    """The prompt tokens one ``width`` x ``height`` image costs a model of ``family``."""
    return get_family(family).image_tokens(width, height, max_num_tiles=max_num_tiles)
