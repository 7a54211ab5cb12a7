"""What the navigation guard decides about a request, and how it reports a refusal.

``PolicyJudge`` is the part of the ``NavigationGuard`` (``webagent.browser.guard``) that the
interceptions on each target (``webagent.browser.targets``) call: ``verdict`` for each paused
request, and one ``refused_*`` per kind of refusal, which counts it, logs it, and reports the
navigations to the session (``on_event``) for the policy's next observation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from ..guard.navigation import NavigationPolicy
from ..guard.secrets import shorten

__all__ = ["PolicyJudge"]

log = structlog.get_logger("webagent.browser")
_URL_CHARS = 160


def _short(url: str) -> str:
    return shorten(url, _URL_CHARS)  # redacted before it is cut: no part of a secret survives


class PolicyJudge:
    """A navigation policy's verdicts on requests, and the reports of what it refused."""

    def __init__(self, policy: NavigationPolicy) -> None:
        self.policy = policy
        #: Receives each report for the policy, and the id of the frame whose navigation was
        #: refused ("" for a new tab): the session stops waiting when it is its page's main frame.
        self.on_event: Callable[[str, str], None] = lambda text, frame_id: None
        self.blocked_navigations = 0
        self.blocked_requests = 0
        #: Set when the first navigation of a new tab was refused (the tab is left on an error page).
        self.popup_blocked = asyncio.Event()

    @property
    def active(self) -> bool:
        return self.policy.active

    @property
    def every_request(self) -> bool:
        """Whether subresources are checked too (else only document requests)."""
        return self.policy.active and self.policy.every_request

    def verdict(self, url: str, *, navigation: bool) -> str | Awaitable[str | None] | None:
        """Why a request for ``url`` is refused (None: allowed); an awaitable where the answer needs
        DNS (a navigation to a host name while private networks are refused)."""
        reason = self.policy.check(url, navigation=navigation)
        if reason is not None or not navigation or not self.policy.block_private:
            return reason
        return self.policy.check_resolved(url, navigation=True)

    def refused_navigation(self, url: str, reason: str, frame_id: str, *, redirect: bool) -> None:
        self.blocked_navigations += 1
        what = "a redirect" if redirect else "a navigation"
        self.on_event(f"Blocked {what} to {_short(url)}: {reason}; the page stayed where it was.", frame_id)
        log.info("navigation_blocked", url=_short(url), reason=reason, redirect=redirect)

    def refused_frame(self, url: str, reason: str, frame_id: str) -> None:
        self.blocked_navigations += 1
        self.on_event(f"Blocked a frame on the page from loading {_short(url)}: {reason}.", frame_id)
        log.info("navigation_blocked", url=_short(url), reason=reason, frame=True)

    def refused_new_tab(self, url: str, reason: str) -> None:
        self.blocked_navigations += 1
        self.popup_blocked.set()
        self.on_event(f"Blocked a new tab that was to open {_short(url)}: {reason}.", "")
        log.info("navigation_blocked", url=_short(url), reason=reason, new_tab=True)

    def refused_request(self, url: str, reason: str) -> None:
        self.blocked_requests += 1
        log.debug("request_blocked", url=_short(url), reason=reason)
