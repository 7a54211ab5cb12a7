"""Launching Chromium (the system's when present, its headless shell for an unguarded headless
browser; Playwright's bundled build otherwise), or connecting to a remote one: a Playwright browser
server (``browser.ws_endpoint``) or a Chromium with a remote-debugging port (``browser.cdp_endpoint``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import structlog
from playwright.async_api import Browser, Playwright
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from ..config import BrowserConfig
from ..errors import BrowserError, BrowserTimeoutError
from ..guard.navigation import parse_rules
from .deadline import within
from .devtools import connect_devtools, free_port
from .netrules import resolver_rules

__all__ = [
    "CHROMIUM_ARGS",
    "DISABLED_FEATURES",
    "FULL_CHROMIUM_CHANNEL",
    "HARDENED_ARGS",
    "browser_args",
    "connect_browser",
    "find_chromium",
    "hardened_args",
    "kill_frozen",
    "killed_frozen",
    "launch_browser",
    "open_browser",
]

log = structlog.get_logger("webagent.browser")

#: The main process of each browser launched here (``SystemInfo.getProcessInfo`` at launch).
_LAUNCHED: weakref.WeakKeyDictionary[Browser, int] = weakref.WeakKeyDictionary()
#: The browsers ``kill_frozen`` ended (their disconnect is not a crash).
_KILLED: weakref.WeakSet[Browser] = weakref.WeakSet()

SYSTEM_CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
#: Chromium's headless shell (Debian's ``chromium-headless-shell``): Chromium's content layer without
#: the browser UI, what Playwright itself launches for headless Chromium. The full browser's headless
#: mode draws a window per context whose tab throbber animates while a page loads: 27 ms of CPU a
#: second for each page still loading, against 0.2 here, and twice the CPU to open a session
#: (docs/benchmarks.md, "What a page costs, by binary: the headless shell"). Not for guarded
#: sessions: the shell is Chromium's content layer only, where ``--webrtc-ip-handling-policy`` (a
#: Chrome switch) does nothing and WebRTC's UDP would leave past the guard
#: (tests/browser/test_attacks.py), so hardened browsers stay on the full Chromium.
#: Debian's binary first: its /usr/bin wrapper script stays alive as the browser's parent (no
#: ``exec``), a process more per browser and the one a signal meant for the browser would reach.
SYSTEM_HEADLESS_SHELL = ("/usr/lib/chromium/chromium-headless-shell", "/usr/bin/chromium-headless-shell")
#: Playwright's channel for its full Chromium build in headless mode (its default headless launch
#: is its own headless shell): what a guarded browser gets when there is no system Chromium.
FULL_CHROMIUM_CHANNEL = "chromium"

#: Playwright's own --disable-features list (a later --disable-features flag replaces it, so it is
#: repeated here), plus the omnibox WebUI renderers that Debian's headless Chromium starts per
#: context (~49 MiB each).
DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
    "WebUIOmniboxPopup",
    "PreloadTopChromeWebUI",
    "WebUIOmniboxFullPopup",
    "WebUIOmniboxAimPopup",
    "Translate",
)

CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--mute-audio",
    "--disable-smooth-scrolling",
    "--disable-features=" + ",".join(DISABLED_FEATURES),
)


#: What a browser launched for guarded sessions (a navigation policy that can refuse something)
#: also gets: the channels the navigation guard cannot see into, switched off (each proven by an
#: attack in tests/browser/test_attacks.py, not by the flag being there). Shared workers: their
#: WebSockets escape every interception; WebRTC: no UDP that does not go through a proxy (STUN
#: and TURN over UDP; over TCP it goes through the context's proxy net, see netrules); FedCM: the
#: identity provider requests are the browser's own. Chromium 156 has no switch for WebTransport,
#: PaymentRequest or speculation-rules prefetch: the proxy net stops those (docs/security.md).
HARDENED_ARGS = (
    "--disable-shared-workers",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-blink-features=FedCm",
)
_LIST_FLAGS = ("--disable-features=", "--disable-blink-features=", "--enable-features=", "--host-resolver-rules=")


def hardened_args(config: BrowserConfig) -> list[str]:
    """The flags a browser for guarded sessions gets besides webagent's own (``HARDENED_ARGS``, and
    resolver rules for the names of ``config.blocked_domains``), for a browser launched elsewhere
    (the pytest plugin's)."""
    return [*HARDENED_ARGS, *_resolver_flag(config.blocked_domains)]


def _resolver_flag(blocked: tuple[str, ...] | list[str]) -> list[str]:
    rules = resolver_rules(parse_rules(blocked))
    return ["--host-resolver-rules=" + ",".join(rules)] if rules else []


def browser_args(
    extra: list[str] | tuple[str, ...] = (), *, hardened: bool = False, blocked: tuple[str, ...] | list[str] = ()
) -> list[str]:
    """webagent's Chromium flags, then ``extra``, de-duplicated; for guarded sessions
    (``hardened``) ``HARDENED_ARGS`` and host resolver rules under which the names of ``blocked``
    (``browser.blocked_domains``) do not resolve. Several ``--disable-features``-style flags are
    merged into one (Chromium keeps only the last), so that a flag of the caller's does not drop
    webagent's list or the other way round; resolver rules too, webagent's first (the first
    matching rule is the one applied)."""
    ours = [*HARDENED_ARGS, *_resolver_flag(blocked)] if hardened else []
    args: list[str] = []
    lists: dict[str, list[str]] = {}
    for arg in [*CHROMIUM_ARGS, *ours, *extra]:
        prefix = next((p for p in _LIST_FLAGS if arg.startswith(p)), None)
        if prefix is None:
            args.append(arg)
            continue
        if prefix not in lists:
            lists[prefix] = []
            args.append(prefix)  # its place, filled in below
        lists[prefix] += [
            v.strip() for v in arg[len(prefix) :].split(",") if v.strip() and v.strip() not in lists[prefix]
        ]
    merged = [a + ",".join(lists[a]) if a in lists else a for a in args]
    return list(dict.fromkeys(merged))


def find_chromium(config: BrowserConfig, *, headless: bool | None = None, hardened: bool = False) -> str | None:
    """The Chromium binary to use: configured, else the system's (its headless shell for a headless
    browser that is not hardened, when installed and ``browser.headless_shell`` is on), else None
    (Playwright's bundled). ``headless``: the launch's, when it is not the config's."""
    headless = config.headless if headless is None else headless
    if config.executable_path:
        path = Path(config.executable_path)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise BrowserError(
                f"browser.executable_path {config.executable_path} is not an executable file; "
                "fix the path or remove it to use the system or bundled Chromium"
            )
        return str(path)
    if headless and config.headless_shell and not hardened:
        for candidate in SYSTEM_HEADLESS_SHELL:
            if os.access(candidate, os.X_OK):
                return candidate
    for candidate in SYSTEM_CHROMIUM:
        if Path(candidate).is_file():
            return candidate
    found = shutil.which("chromium")
    return found


async def launch_browser(
    playwright: Playwright,
    config: BrowserConfig,
    *,
    options: Mapping[str, Any] | None = None,
    hardened: bool = False,
) -> Browser:
    """Launch one Chromium for many sessions (one context each).

    ``options``: more keyword arguments of Playwright's ``BrowserType.launch`` (pytest-playwright's
    launch arguments: ``channel``, ``slow_mo``, ...); their ``args`` come after webagent's flags,
    and their ``headless`` and ``executable_path`` win over the config's. ``hardened``: for
    guarded sessions (``HARDENED_ARGS``).
    """
    extra = dict(options or {})
    headless = bool(extra.pop("headless", config.headless))
    executable = extra.pop("executable_path", None) or (
        None if extra.get("channel") else find_chromium(config, headless=headless, hardened=hardened)
    )
    args = browser_args([*config.args, *extra.pop("args", [])], hardened=hardened, blocked=config.blocked_domains)
    # A DevTools port of our own for the per-step commands (webagent.browser.devtools), unless
    # turned off or the configured flags already set up remote debugging (a port, or an address
    # that is perhaps not loopback).
    port = None
    if config.direct_cdp and not any(
        a.startswith(("--remote-debugging-port", "--remote-debugging-address")) for a in args
    ):
        port = free_port()
        args.append(f"--remote-debugging-port={port}")
    if hardened and headless and executable is None and not extra.get("channel"):
        # Playwright's own headless Chromium is its headless shell (no system one here): a guarded
        # browser gets its full build instead, as it gets the system's full Chromium.
        extra["channel"] = FULL_CHROMIUM_CHANNEL
    try:
        # Playwright's own launch timeout first (it cleans up); ours too, in case its driver stops answering:
        # the pool launches one browser at a time, and sessions waiting for it are not stalls.
        extra.setdefault("timeout", config.open_timeout_s * 1000)
        browser = await within(
            playwright.chromium.launch(executable_path=executable, headless=headless, args=args, **extra),
            config.open_timeout_s + config.command_timeout_s,
            "chromium.launch",
        )
    except PlaywrightError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, PlaywrightTimeoutError):  # ours (CommandTimeout) or Playwright's own
            raise BrowserTimeoutError(f"Chromium did not start ({first}): the machine may be overloaded") from None
        raise BrowserError(
            f"cannot launch Chromium ({executable or 'Playwright bundled'}): {first}; install Debian's "
            "chromium (apt-get install chromium), run `playwright install chromium`, or set browser.executable_path"
        ) from None
    if port is not None:
        try:
            devtools = await connect_devtools(browser, "127.0.0.1", port, timeout_s=config.command_timeout_s)
        except BaseException:  # a failed or cancelled launch leaves no Chromium behind
            with contextlib.suppress(Exception):
                await within(browser.close(), config.open_timeout_s, "browser.close")
            raise
        if devtools is not None:  # its main process, for ``kill_frozen`` (the browser is ours)
            with contextlib.suppress(PlaywrightError, LookupError, TypeError, ValueError):
                # A few seconds at most: without it, a frozen browser is only retired, as a remote one.
                info = await devtools.request(
                    "SystemInfo.getProcessInfo", None, timeout_s=min(5.0, config.command_timeout_s)
                )
                _LAUNCHED[browser] = next(int(p["id"]) for p in info["processInfo"] if p["type"] == "browser")
    log.debug("browser_launched", executable=executable or "bundled", version=browser.version, devtools_port=port)
    return browser


def kill_frozen(browser: Browser | None) -> bool:
    """SIGKILL the main process of a browser this process launched that answers nothing (frozen: a
    probe over its direct connection went unanswered). Every session on it then fails at once, as
    after a crash, instead of each waiting out its own deadlines on a browser that will not answer
    (a tab being followed, a CDP session being opened). False for a browser not launched here (a
    remote one is never signalled) or already gone."""
    pid = _LAUNCHED.pop(browser, None) if browser is not None else None
    if pid is None or browser is None or not browser.is_connected():
        return False
    _KILLED.add(browser)
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        _KILLED.discard(browser)
        return False
    log.warning("browser_killed_frozen", pid=pid)
    return True


def killed_frozen(browser: Browser) -> bool:
    """Whether ``kill_frozen`` ended ``browser``."""
    return browser in _KILLED


async def connect_browser(playwright: Playwright, config: BrowserConfig, *, hardened: bool = False) -> Browser:
    """Connect to the remote browser of ``config`` (``ws_endpoint`` or ``cdp_endpoint``).

    A Playwright browser server launches a browser for each connection, with the launch options
    sent in the ``x-playwright-launch-options`` header (a server started without ``--unsafe``
    ignores ``args`` and ``executablePath``; ``hardened`` adds ``HARDENED_ARGS`` to them). Over
    CDP the browser is shared: closing the connection leaves it running, as it was started.
    """
    timeout_ms = config.navigation_timeout_s * 1000
    try:
        if config.ws_endpoint:
            options: dict[str, object] = {
                "headless": config.headless,
                "args": browser_args(config.args, hardened=hardened),
            }
            if config.executable_path:  # a path on the server's machine
                options["executablePath"] = config.executable_path
            elif hardened and config.headless:  # the server's full Chromium, not its headless shell
                options["channel"] = FULL_CHROMIUM_CHANNEL
            headers = {"x-playwright-launch-options": json.dumps(options)}
            connecting = playwright.chromium.connect(config.ws_endpoint, timeout=timeout_ms, headers=headers)
            browser = await within(connecting, config.open_timeout_s + config.command_timeout_s, "chromium.connect")
        elif config.cdp_endpoint:
            connecting = playwright.chromium.connect_over_cdp(config.cdp_endpoint, timeout=timeout_ms)
            browser = await within(connecting, config.open_timeout_s + config.command_timeout_s, "connect_over_cdp")
        else:
            raise BrowserError("no remote browser configured (browser.ws_endpoint or browser.cdp_endpoint)")
    except PlaywrightError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        kind = "browser.ws_endpoint" if config.ws_endpoint else "browser.cdp_endpoint"
        raise BrowserError(
            f"cannot connect to the remote browser at {config.remote} ({kind}): {first}; "
            "check that it is running and reachable from here"
        ) from None
    log.debug("browser_connected", endpoint=config.remote, version=browser.version)
    return browser


async def open_browser(playwright: Playwright, config: BrowserConfig, *, hardened: bool = False) -> Browser:
    """Connect to the configured remote browser, or launch one here (``hardened``: for guarded sessions)."""
    if config.remote:
        return await connect_browser(playwright, config, hardened=hardened)
    return await launch_browser(playwright, config, hardened=hardened)
