"""Configuration: Pydantic models, loaded from TOML, then environment, then explicit overrides.

Precedence (lowest to highest): defaults < TOML file < ``WEBAGENT_<SECTION>_<FIELD>`` environment
variables < overrides (CLI flags or keyword arguments). Unknown keys are errors that name the key.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from .errors import ConfigError
from .families import FAMILY_RULES, HOLOTRON_MAX_NUM_TILES, Family
from .images import ResizeRule
from .safety import parse_rule
from .secrets import check_secret

if TYPE_CHECKING:
    from .records import ModelCall

__all__ = [
    "PROFILES",
    "AgentConfig",
    "AgentSettings",
    "BrowserConfig",
    "LocalizerConfig",
    "PolicyConfig",
    "RoleConfig",
    "Viewport",
    "load_config",
]

Profile = Literal["holo1", "holo1.5", "holo2"]
ROLES = ("policy", "localizer", "validator")
SECTIONS = (*ROLES, "agent", "browser", "secrets")
SECRET_ENV_PREFIX = "WEBAGENT_SECRET_"

#: Resize rule of each localizer profile (the model's image processor).
PROFILES: dict[str, ResizeRule] = dict(FAMILY_RULES)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RoleConfig(_Section):
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


class PolicyConfig(RoleConfig):
    """The policy role, plus its model family (what its requests ask of the server's image processor)."""

    family: Family | None = Field(
        default=None,
        description="holo1 | holo1.5 | holo2 | holotron: the policy model's family. Set, each policy request "
        "carries its fields (holotron: mm_processor_kwargs.max_num_tiles; holo2: chat_template_kwargs "
        "thinking=false); unset, the localizer profile's family is assumed for token costs and nothing is added",
    )
    max_num_tiles: int = Field(
        default=HOLOTRON_MAX_NUM_TILES,
        ge=1,
        le=40,
        description="holotron: 512-px tiles per screenshot at most (sent as mm_processor_kwargs; a screenshot "
        "costs 256 tokens a tile, plus 256 for the thumbnail when there is more than one)",
    )
    image_uuid: bool = Field(
        default=False,
        description="Give each screenshot a stable uuid (its content hash) in the request, which vLLM 0.10.2+ "
        "uses for its image caches instead of hashing the image; only for servers that accept the field",
    )

    def resolved_family(self, localizer: LocalizerConfig) -> Family:
        """The family in use: the one set, else the localizer profile's."""
        return self.family or localizer.profile


class LocalizerConfig(RoleConfig):
    """The localizer role, plus the model family's coordinate convention."""

    max_tokens: int = Field(default=128, gt=0)
    profile: Profile = Field(default="holo1.5", description="holo1 | holo1.5 | holo2")
    min_pixels: int | None = Field(default=None, gt=0, description="Override the profile's min_pixels")
    max_pixels: int | None = Field(default=None, gt=0, description="Override the profile's max_pixels")

    def resize_rule(self) -> ResizeRule:
        base = PROFILES[self.profile]
        return ResizeRule(
            factor=base.factor,
            min_pixels=self.min_pixels or base.min_pixels,
            max_pixels=self.max_pixels or base.max_pixels,
        )


class ValidatorConfig(RoleConfig):
    max_tokens: int = Field(default=512, gt=0)


class AgentSettings(_Section):
    max_steps: int = Field(default=30, gt=0)
    max_attempts: int = Field(default=3, gt=0, description="Answers the validator may judge")
    max_time_s: float = Field(default=600.0, gt=0)
    context: Literal["append", "window"] = Field(
        default="append",
        description="The policy's context: append = one conversation that grows by a turn per step (earlier "
        "turns never change, so a server prefix cache reuses them), restarted every epoch_steps; window = each "
        "request rebuilt from the task, notes, recent actions and the last screenshots_in_context screenshots",
    )
    epoch_steps: int = Field(
        default=6,
        ge=1,
        description="append: steps (and so screenshots) per epoch; a new epoch restarts the conversation from "
        "the task, the notes, the recent actions and the current screenshot",
    )
    epoch_max_chars: int = Field(
        default=8000,
        ge=0,
        description="append: an epoch also ends once its text (turns and replies) reaches this many characters "
        "(0: no limit)",
    )
    screenshots_in_context: int = Field(default=3, ge=1, description="window: screenshots per policy request")
    recent_actions: int = Field(default=8, ge=0, description="Recent actions shown to the policy")
    notes_max_chars: int = Field(default=1200, ge=0, description="Budget for notes shown to the policy")
    validator_screenshots: int = Field(default=2, ge=1, description="Final screenshots shown to the validator")
    repeat_warning_after: int = Field(
        default=3,
        ge=0,
        description="The policy is told to try something else once the same action has changed nothing visible "
        "this many times in a row (0: never; a single action that changed nothing is always told)",
    )
    budget_calls: int | None = Field(default=None, ge=0, description="Hard limit on model calls per run")
    budget_tokens: int | None = Field(default=None, ge=0, description="Hard limit on tokens (all roles) per run")
    budget_usd: float | None = Field(default=None, ge=0, description="Hard limit on dollars per run")


class Viewport(_Section):
    width: int = Field(default=1280, ge=200, le=7680)
    height: int = Field(default=800, ge=200, le=4320)


class BrowserConfig(_Section):
    headless: bool = True
    executable_path: str | None = Field(
        default=None, description="Chromium binary (default: /usr/bin/chromium if present)"
    )
    viewport: Viewport = Field(default_factory=Viewport)
    screenshot_format: Literal["jpeg", "png"] = "jpeg"
    jpeg_quality: int = Field(default=85, ge=1, le=100)
    settle_timeout_s: float = Field(default=3.0, ge=0, description="Cap on waiting for a page to settle")
    navigation_timeout_s: float = Field(default=30.0, gt=0)
    command_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Deadline of one browser command (a click, a key, a DevTools request); one past it is handled "
        "as a page that does not respond. Opening and closing contexts and tabs get navigation_timeout_s more",
    )
    capture_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="A screenshot not taken within this is retaken another way, and if the page still gives "
        "none, the page is reopened in a new tab (the policy is told). A capture lost to a navigation is "
        "retaken at once, whatever this is",
    )
    contexts_per_browser: int = Field(default=100, ge=1, description="Sessions sharing one Chromium process")
    recycle_after: int = Field(default=500, ge=1, description="Contexts a Chromium serves before it is relaunched")
    args: list[str] = Field(default_factory=list, description="Extra Chromium command-line flags")
    direct_cdp: bool = Field(
        default=True,
        description="Send each step's click, check and screenshot straight to a launched Chromium's DevTools "
        "port (a free 127.0.0.1 port) instead of through Playwright's driver; false: Playwright only",
    )
    allowed_domains: list[str] = Field(
        default_factory=list,
        description="Only these hosts may be opened or requested (host, host:port or *.example.com); empty: any",
    )
    blocked_domains: list[str] = Field(default_factory=list, description="Hosts that may never be opened or requested")
    private_network: Literal["auto", "allow", "block"] = Field(
        default="auto",
        description="Private/loopback addresses: auto = blocked unless the start URL is local; allow; block",
    )

    @field_validator("allowed_domains", "blocked_domains", mode="before")
    @classmethod
    def _domains(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [v]
        if isinstance(v, list):  # entries may also be comma-separated
            items = [part for item in v for part in str(item).replace(",", " ").split()]
            for item in items:
                parse_rule(item)  # ValueError names the bad entry
            return items
        return v

    ws_endpoint: str | None = Field(
        default=None,
        description="Connect to a Playwright browser server (playwright run-server) at this ws:// URL instead of "
        "launching Chromium; headless, args and executable_path are sent as its launch options",
    )
    cdp_endpoint: str | None = Field(
        default=None,
        description="Connect to a running Chromium over CDP (its --remote-debugging-port: http://host:port or the "
        "ws:// URL it printed) instead of launching one",
    )

    @field_validator("ws_endpoint", "cdp_endpoint")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        v = v.strip()
        if not v.startswith(("ws://", "wss://", "http://", "https://")):
            raise ValueError(f"must be a ws://, wss://, http:// or https:// URL, got {v!r}")
        return v

    @property
    def open_timeout_s(self) -> float:
        """Deadline of opening or closing a context or tab: a browser busy with many sessions answers
        these last (100 tabs opened at once on 2 cores: 13-15 s)."""
        return self.navigation_timeout_s + self.command_timeout_s

    @model_validator(mode="after")
    def _one_endpoint(self) -> BrowserConfig:
        if self.ws_endpoint and self.cdp_endpoint:
            raise ValueError("set either ws_endpoint or cdp_endpoint, not both")
        return self

    @property
    def remote(self) -> str | None:
        """The remote browser's endpoint, if the browser is not launched here."""
        return self.ws_endpoint or self.cdp_endpoint

    @field_validator("viewport", mode="before")
    @classmethod
    def _viewport(cls, v: Any) -> Any:
        if isinstance(v, str):
            w, sep, h = v.lower().partition("x")
            if not sep or not w.strip().isdigit() or not h.strip().isdigit():
                raise ValueError(f"viewport must look like 1280x800, got {v!r}")
            return {"width": int(w), "height": int(h)}
        return v


class AgentConfig(_Section):
    """Everything an Agent needs: three model roles, the loop's limits, the browser."""

    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    localizer: LocalizerConfig = Field(default_factory=LocalizerConfig)
    validator: ValidatorConfig = Field(default_factory=ValidatorConfig)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    browser: BrowserConfig = Field(default_factory=BrowserConfig)
    secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Values the policy types as {{NAME}} without ever seeing them ([secrets] or WEBAGENT_SECRET_<NAME>)",
    )

    @field_validator("secrets", mode="before")
    @classmethod
    def _secrets(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for name, value in v.items():
                raw = value.get_secret_value() if isinstance(value, SecretStr) else value
                if not isinstance(raw, str):
                    raise ValueError(f"secret {name} must be a string")
                check_secret(str(name), raw)
        return v

    def role(self, name: str) -> RoleConfig:
        if name not in ROLES:
            raise KeyError(name)
        role: RoleConfig = getattr(self, name)
        return role

    def price(self, call: ModelCall) -> float:
        """Dollar cost of one model call at the configured per-role prices."""
        return self.role(call.role).cost(call.usage.prompt_tokens, call.usage.completion_tokens)

    def require_endpoints(self, roles: Sequence[str] = ROLES) -> None:
        """Raise ConfigError naming the first of ``roles`` without a base_url or model."""
        for name in roles:
            role = self.role(name)
            for field in ("base_url", "model"):
                if not getattr(role, field):
                    flag = f"--{name}-{field.replace('_', '-')}"
                    env = f"WEBAGENT_{name.upper()}_{field.upper()}"
                    raise ConfigError(
                        f"no {field.replace('_', ' ')} configured for the {name} model: "
                        f"set [{name}] {field} in the config file, {env}, or {flag}"
                    )

    @classmethod
    def load(
        cls,
        path: str | Path | None = None,
        *,
        env: Mapping[str, str] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> AgentConfig:
        return load_config(path, env=env, overrides=overrides)


def load_config(
    path: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> AgentConfig:
    """Build a config from a TOML file, ``WEBAGENT_*`` environment variables and overrides.

    ``overrides`` maps dotted keys (``"policy.model"``, ``"browser.viewport"``) to values; None
    values are ignored. ``env`` defaults to ``os.environ``.
    """
    data: dict[str, Any] = {}
    sources: dict[str, str] = {}  # "section.field" -> where its value came from
    file_source = ""
    if path is not None:
        data = _read_toml(Path(path))
        file_source = str(path)
        _check_keys(data, file_source)
        for section, table in data.items():
            sources.update({f"{section}.{field}": file_source for field in table})
    for key, (name, value) in _env_overrides(os.environ if env is None else env).items():
        _set_dotted(data, key, value)
        sources[key] = name
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(data, key, value)
            sources[key] = "command line"
    try:
        return AgentConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe_validation(exc, sources, file_source)) from None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None


def _check_keys(data: Mapping[str, Any], source: str) -> None:
    for key, value in data.items():
        if key not in SECTIONS:
            raise ConfigError(f"unknown section [{key}] in {source}; known sections: {', '.join(SECTIONS)}")
        if not isinstance(value, dict):
            raise ConfigError(f"[{key}] in {source} must be a table")


def _env_overrides(env: Mapping[str, str]) -> dict[str, tuple[str, Any]]:
    """``{"section.field": (variable name, value)}`` for the WEBAGENT_<SECTION>_<FIELD> variables."""
    out: dict[str, tuple[str, Any]] = {}
    for name, value in env.items():
        if not name.startswith("WEBAGENT_"):
            continue
        if name.startswith(SECRET_ENV_PREFIX):
            out[f"secrets.{name[len(SECRET_ENV_PREFIX) :]}"] = (name, value)
            continue
        rest = name[len("WEBAGENT_") :].lower()
        section = next((s for s in SECTIONS if s != "secrets" and rest.startswith(s + "_")), None)
        if section is None:
            continue  # other WEBAGENT_* variables belong to other features
        field = rest[len(section) + 1 :]
        model = AgentConfig.model_fields[section].annotation
        fields = getattr(model, "model_fields", {})
        if field not in fields:
            raise ConfigError(
                f"unknown environment variable {name}: [{section}] has no key {field!r} "
                f"(known: {', '.join(sorted(fields))})"
            )
        out[f"{section}.{field}"] = (name, value.split() if fields[field].annotation == list[str] else value)
    return out


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    section, _, field = key.partition(".")
    if section not in SECTIONS or not field:
        raise ConfigError(f"unknown setting {key!r}")
    data.setdefault(section, {})[field] = value


def _describe_validation(exc: ValidationError, sources: Mapping[str, str], file_source: str) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    source = sources.get(".".join(str(p) for p in err["loc"][:2]), file_source)
    where = f" (from {source})" if source else ""
    if err["type"] == "extra_forbidden":
        return f"unknown config key {loc!r}{where}"
    msg = err["msg"].removeprefix("Value error, ")
    if err["loc"][0] == "secrets":  # never quote a secret's value
        return f"invalid secret{where}: {msg}"
    got = f" (got {err.get('input')!r})" if "got" not in msg else ""
    return f"invalid value for {loc}{where}: {msg}{got}"
