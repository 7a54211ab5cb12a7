"""The ``[browser]`` section: launching or connecting to Chromium, its viewport, deadlines and allowed hosts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..guard.navigation import parse_rule
from ._base import Section
from ._context import ContextSettings
from ._fleet import BrowserHost, ProviderKind

__all__ = ["BrowserConfig", "Viewport"]


class Viewport(Section):
    width: int = Field(default=1280, ge=200, le=7680)
    height: int = Field(default=800, ge=200, le=4320)


class BrowserConfig(ContextSettings):
    """``[browser]``: launching or connecting to Chromium, and what each context opens with (``ContextSettings``)."""

    headless: bool = True
    executable_path: str | None = Field(
        default=None,
        description="Chromium binary (default: the system's headless shell when headless and unguarded, else "
        "/usr/bin/chromium, if present; else Playwright's own)",
    )
    headless_shell: bool = Field(
        default=True,
        description="Headless and unguarded, launch the system's chromium-headless-shell when it is installed, as "
        "Playwright does with its own browsers: no browser UI, about half the CPU to open a session, and none for "
        "the throbber of a page still loading (guarded sessions keep the full Chromium, whose switches close "
        "WebRTC's UDP); false: the full Chromium's headless mode",
    )
    viewport: Viewport = Field(default_factory=Viewport)
    screenshot_format: Literal["jpeg", "png"] = "jpeg"
    jpeg_quality: int = Field(default=85, ge=1, le=100)
    hide_caret: bool = Field(
        default=True,
        description="Make the text caret transparent in the pages the agent drives, as Playwright's own "
        "screenshots do: it blinks, so two screenshots of an unchanged page with a focused field would differ",
    )
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
    downloads: Literal["keep", "refuse"] = Field(
        default="keep",
        description="keep: a file a page downloads is saved in the run's downloads/ folder and told to the policy "
        "(Downloaded: NAME (N bytes)); refuse: every download is cancelled and told",
    )
    max_downloads: int = Field(
        default=20, ge=0, description="Downloads a run keeps; those past it are cancelled (told in one line)"
    )
    max_download_mb: float = Field(
        default=100.0, gt=0, description="A download larger than this (MiB) is cancelled and told, never kept"
    )
    download_timeout_s: float = Field(
        default=120.0, gt=0, description="A download not finished within this is cancelled and told"
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

    provider: ProviderKind = Field(
        default="local",
        description="Who hands out browsers: local (launched here, or ws_endpoint/cdp_endpoint), hosts (the "
        "[[browser.hosts]] list), plugin (the provider installed under the name in plugin)",
    )
    hosts: list[BrowserHost] = Field(
        default_factory=list, description="The browser hosts of provider hosts ([[browser.hosts]] url, sessions)"
    )
    plugin: str | None = Field(
        default=None, description="The browser provider plugin's name (entry point group webagent.browser_providers)"
    )
    plugin_options: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Options handed to the provider plugin"
    )
    probe_interval_s: float = Field(
        default=5.0, gt=0, description="Seconds between health probes of each leased browser host"
    )
    probe_timeout_s: float = Field(
        default=3.0, gt=0, description="A host that does not answer a probe within this is quarantined"
    )
    node_browser: bool | Literal["auto"] = Field(
        default="auto",
        description="Under batch --ray with provider local: the actors of a Ray node share one Chromium over a "
        "DevTools port on 127.0.0.1 (never when the batch holds secrets or a signed-in state, or direct_cdp is "
        "off): auto, on nodes of 6 actors or more (where it saves memory); true, on nodes of 2 or more; false, "
        "never (a Chromium per actor)",
    )

    @model_validator(mode="after")
    def _provider(self) -> BrowserConfig:
        if self.provider != "local" and self.remote:
            raise ValueError(f"provider {self.provider} hands out browsers itself: remove ws_endpoint/cdp_endpoint")
        if self.provider == "hosts" and not self.hosts:
            raise ValueError('provider "hosts" needs at least one [[browser.hosts]] entry with a url')
        if self.hosts and self.provider != "hosts":
            raise ValueError('[[browser.hosts]] is given: set provider = "hosts" to use them')
        if self.provider == "plugin" and not self.plugin:
            raise ValueError('provider "plugin" needs plugin = "<name of the installed provider>"')
        if self.plugin and self.provider != "plugin":
            raise ValueError('plugin is given: set provider = "plugin" to use it')
        labels = [h.label for h in self.hosts]
        twice = next((label for label in labels if labels.count(label) > 1), None)
        if twice is not None:
            raise ValueError(f"two browser hosts are named {twice}: give each a name of its own")
        return self

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
