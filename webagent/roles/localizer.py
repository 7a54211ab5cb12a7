"""The localizer role: an element description in, a click point out.

Each profile is one model family's element-localization contract (``webagent.families``): its
prompt template, its reply and the reply's coordinates:

=================  ==========================================  ====================================
reply              what the model writes                       coordinates
=================  ==========================================  ====================================
``click_text``     ``Click(x, y)``                             absolute pixels of the image sent
``absolute_json``  ``{"action":"click_absolute","x":..,"y":..}`` absolute pixels of the image sent
``normalised_json`` ``{"x":..,"y":..}``                        normalised to 0..1000 of the image sent
=================  ==========================================  ====================================

The screenshot is sized by the profile's resize rule (see ``webagent.images``). A point outside
the image is a LocalizationError, never a click at a clamped point.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..config import LocalizerConfig
from ..errors import LocalizationError
from ..families import AGENT_MAX_NUM_TILES, FAMILIES, PROFILES, LocalizerReply, SchemaField
from ..images import Frame, ResizeRule, Screenshot, frame_for
from ..model.client import Message, ModelClient
from ..model.parsing import ReplyParseError, parse_reply
from ..model.schema import schema_fields
from ..prompts import render
from ..records import ModelCall, Point

__all__ = ["LOCALIZER_PROFILES", "Localizer", "LocalizerProfile", "localizer_messages", "parse_click"]

NORMALISED_MAX = 1000
_CLICK = re.compile(r"Click\(\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\)", re.IGNORECASE)


class _ClickAbsolute(BaseModel):
    model_config = ConfigDict(extra="ignore")
    action: Literal["click_absolute"] = "click_absolute"
    x: float
    y: float


class _ClickNormalised(BaseModel):
    model_config = ConfigDict(extra="ignore")
    x: float
    y: float


class _ClickAbsoluteSchema(BaseModel):
    action: Literal["click_absolute"]
    x: int
    y: int


class _ClickNormalisedSchema(BaseModel):
    x: int
    y: int


class _ClickNormalisedBounds(BaseModel):
    """H's localization schema, shown in the prompt: integers in [0, 1000]."""

    x: int = Field(ge=0, le=NORMALISED_MAX, description="X coordinate as integer in [0, 1000]")
    y: int = Field(ge=0, le=NORMALISED_MAX, description="Y coordinate as integer in [0, 1000]")


@dataclass(frozen=True, slots=True)
class LocalizerProfile:
    """One family's localization contract, as the localizer speaks it."""

    name: str
    template: str
    reply: LocalizerReply
    extra_body: dict[str, Any] | None = None
    schema_field: SchemaField = "response_format"

    @property
    def output_fields(self) -> dict[str, Any] | None:
        """The request fields that ask for the reply's schema (None: a text reply)."""
        return _output_fields(self.reply, self.schema_field)


def _profile(name: str) -> LocalizerProfile:
    family = FAMILIES[name]
    contract = family.localizer
    assert contract is not None
    extra = family.request_fields("single", AGENT_MAX_NUM_TILES)
    return LocalizerProfile(name, contract.template, contract.reply, extra, contract.schema_field)


#: The localizer profiles: the registered families that localize elements.
LOCALIZER_PROFILES: dict[str, LocalizerProfile] = {name: _profile(name) for name in PROFILES}


@cache
def _output_fields(reply: str, field: SchemaField) -> dict[str, Any] | None:
    if reply == "absolute_json":
        return schema_fields(field, "click_absolute", _ClickAbsoluteSchema)
    if reply == "normalised_json":
        return schema_fields(field, "click", _ClickNormalisedSchema)
    return None


@cache
def _schema_text() -> str:
    return json.dumps(_ClickNormalisedBounds.model_json_schema())


def parse_click(text: str, profile: LocalizerProfile, frame: Frame) -> tuple[float, float]:
    """Parse a localizer reply into image pixels (not yet checked against the image bounds)."""
    match profile.reply:
        case "click_text":
            m = _CLICK.search(text)
            if not m:
                raise ReplyParseError("the reply does not contain a click of the form Click(x, y)")
            return float(m.group(1)), float(m.group(2))
        case "absolute_json":
            click = parse_reply(text, _ClickAbsolute)
            return click.x, click.y
        case "normalised_json":
            norm = parse_reply(text, _ClickNormalised)
            return norm.x * frame.image_width / NORMALISED_MAX, norm.y * frame.image_height / NORMALISED_MAX


def localizer_messages(profile: LocalizerProfile, element: str, shot: Screenshot) -> list[Message]:
    """The localizer request's messages (also rebuilt from run directories by ``webagent.training.export``)."""
    text = render(
        profile.template,
        element=element,
        width=shot.frame.image_width,
        height=shot.frame.image_height,
        schema=_schema_text(),
    )
    return [{"role": "user", "content": [shot.image_part(), {"type": "text", "text": text}]}]


class Localizer:
    """Resolves element descriptions to viewport points with one model call each."""

    def __init__(self, client: ModelClient, config: LocalizerConfig) -> None:
        self.client = client
        self.profile = LOCALIZER_PROFILES[config.profile]
        self.rule: ResizeRule = config.resize_rule()
        self._body = _merge(self.profile.output_fields, self.profile.extra_body)

    def frame(self, viewport_width: int, viewport_height: int) -> Frame:
        """The frame screenshots must have for this profile."""
        return frame_for(viewport_width, viewport_height, self.rule)

    def messages(self, element: str, shot: Screenshot) -> list[Message]:
        return localizer_messages(self.profile, element, shot)

    async def locate(self, element: str, shot: Screenshot) -> tuple[Point, ModelCall]:
        """Locate ``element`` on ``shot``.

        Raises ModelError (with ``.call``) when the model fails, LocalizationError (with
        ``.call``) when its point lies outside the image.
        """
        frame = shot.frame
        (x, y), call = await self.client.call(
            self.messages(element, shot),
            lambda text: parse_click(text, self.profile, frame),
            extra_body=self._body,
            repair_hint=_HINTS[self.profile.reply],
        )
        if not frame.contains(x, y):
            call.error = f"point ({x:g}, {y:g}) is outside the {frame.image_width}x{frame.image_height} image"
            raise LocalizationError(
                f"the localizer placed {element!r} at ({x:g}, {y:g}), outside the "
                f"{frame.image_width}x{frame.image_height} screenshot",
                call=call,
            )
        return Point(image=(x, y), viewport=frame.to_css(x, y)), call


def _merge(*parts: dict[str, Any] | None) -> dict[str, Any] | None:
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part or {})
    return merged or None


_HINTS = {
    "click_text": "Reply with exactly Click(x, y), x and y in pixels of the image.",
    "absolute_json": 'Reply with exactly {"action": "click_absolute", "x": <int>, "y": <int>}.',
    "normalised_json": 'Reply with exactly {"x": <int>, "y": <int>}, normalised between 0 and 1000.',
}
