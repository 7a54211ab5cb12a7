"""The model roles' sections: ``[policy]``, ``[localizer]`` (with its profiles) and ``[validator]``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from ..families import (
    AGENT_MAX_NUM_TILES,
    DEFAULT_PROFILE,
    FAMILIES,
    GENERIC_POLICY,
    PolicyContract,
    check_family,
    check_profile,
    get_family,
)
from ..families import (
    PROFILES as PROFILE_NAMES,
)
from ..images import ResizeRule
from ._base import Section

__all__ = ["PROFILES", "FamilyName", "LocalizerConfig", "PolicyConfig", "Profile", "RoleConfig", "ValidatorConfig"]

#: A registered model family's name (``webagent.families``).
FamilyName = Annotated[str, AfterValidator(check_family)]
#: A family with an element-localization contract.
Profile = Annotated[str, AfterValidator(check_profile)]

#: Resize rule of each localizer profile (the model's image processor).
PROFILES: dict[str, ResizeRule] = {name: rule for name in PROFILE_NAMES if (rule := FAMILIES[name].rule) is not None}
_FAMILY_LIST = " | ".join(FAMILIES)
_PROFILE_LIST = " | ".join(PROFILE_NAMES)


class RoleConfig(Section):
    """One model role's endpoint and sampling settings."""

    base_url: str | list[str] | None = Field(
        default=None,
        description="OpenAI-compatible base URL, e.g. http://host:8000/v1; several (a list, or comma-separated) "
        "spread sessions over servers, each session sticking to one",
    )
    model: str | None = Field(default=None, description="Model name as the server knows it")
    api_key: str | None = Field(default=None, repr=False, description="API key (default: $OPENAI_API_KEY or 'EMPTY')")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=1024, gt=0)
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=4, ge=0, description="Retries on 429/5xx/timeouts/connection errors")
    price_prompt_per_m: float = Field(default=0.0, ge=0, description="$ per million prompt tokens (for cost reports)")
    price_completion_per_m: float = Field(default=0.0, ge=0, description="$ per million completion tokens")
    return_tokens: bool = Field(
        default=False,
        description="Ask the server for each request's prompt and completion token ids and the completion's "
        "logprobs (vLLM 0.10.2+: return_token_ids, logprobs) and keep them in the step records and the export "
        "(for RL trainers; off: nothing asked, nothing kept)",
    )

    @field_validator("base_url", mode="before")
    @classmethod
    def _url(cls, v: object) -> object:
        if v is None:
            return v
        items = v.split(",") if isinstance(v, str) else v
        if not isinstance(items, list) or not items:
            raise ValueError("must be a URL or a list of URLs")
        urls: list[str] = []
        for item in items:
            url = str(item).strip().rstrip("/")
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"must start with http:// or https://, got {url!r}")
            urls.append(url)
        return urls[0] if len(urls) == 1 else urls

    def endpoints(self) -> list[str]:
        """The configured base URLs (empty when none)."""
        if self.base_url is None:
            return []
        return [self.base_url] if isinstance(self.base_url, str) else list(self.base_url)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Dollar cost of that many tokens at this role's prices."""
        return (prompt_tokens * self.price_prompt_per_m + completion_tokens * self.price_completion_per_m) / 1e6


class _FamilyRoleConfig(RoleConfig):
    """A role whose model family may be set: its requests then carry the family's fields."""

    family: FamilyName | None = Field(
        default=None,
        description=f"{_FAMILY_LIST}: the role's model family. Set, each request of the role carries the "
        "family's fields (a tile limit, reasoning switches; see docs/serving.md); unset, nothing is added",
    )
    max_num_tiles: int = Field(
        default=AGENT_MAX_NUM_TILES,
        ge=1,
        le=40,
        description="A family with a tiling image processor: 512-px tiles per screenshot at most (sent as "
        "mm_processor_kwargs; a screenshot costs 256 tokens a tile, plus 256 for the thumbnail when there is "
        "more than one)",
    )

    def extra_body(self) -> dict[str, Any] | None:
        """What the family adds to each single-shot request of the role (None: nothing, or no family set)."""
        if self.family is None:
            return None
        return get_family(self.family).request_fields("single", self.max_num_tiles)


class PolicyConfig(_FamilyRoleConfig):
    """The policy role, plus its model family (what its requests ask of the server's image processor)."""

    family: FamilyName | None = Field(
        default=None,
        description=f"{_FAMILY_LIST}: the policy model's family: its contract (reply format, coordinates, "
        "whether it grounds its own clicks) and the fields each policy request carries (see docs/serving.md); "
        "unset, the localizer profile's family is assumed and nothing is added to the requests",
    )
    output: Literal["json", "tools"] | None = Field(
        default=None,
        description="How the policy replies: json = one JSON object constrained by a schema; tools = native "
        "tool calls (the actions offered as tools; the server needs its tool-call parser). Unset: the "
        "family's default",
    )
    image_uuid: bool = Field(
        default=False,
        description="Give each screenshot a stable uuid (its content hash) in the request, which vLLM 0.10.2+ "
        "uses for its image caches instead of hashing the image; only for servers that accept the field",
    )

    def resolved_family(self, localizer: LocalizerConfig) -> str:
        """The family in use: the one set, else the localizer profile's."""
        return self.family or localizer.profile

    def contract(self) -> PolicyContract:
        """The policy contract spoken: the family's when one is set, else webagent's generic one."""
        return get_family(self.family).policy if self.family is not None else GENERIC_POLICY


class LocalizerConfig(RoleConfig):
    """The localizer role, plus the model family's coordinate convention."""

    max_tokens: int = Field(default=128, gt=0)
    profile: Profile = Field(default=DEFAULT_PROFILE, description=f"{_PROFILE_LIST}: the localizer model's family")
    min_pixels: int | None = Field(default=None, gt=0, description="Override the profile's min_pixels")
    max_pixels: int | None = Field(default=None, gt=0, description="Override the profile's max_pixels")

    def resize_rule(self) -> ResizeRule:
        base = PROFILES[self.profile]
        return ResizeRule(
            factor=base.factor,
            min_pixels=self.min_pixels or base.min_pixels,
            max_pixels=self.max_pixels or base.max_pixels,
        )


class ValidatorConfig(_FamilyRoleConfig):
    """The validator role (it also answers the pytest plugin's and the MCP server's checks), plus its
    model family."""

    max_tokens: int = Field(default=512, gt=0)
