"""What an MCP client may make the server open: the start URLs of ``run_task`` and ``open_session``.

A client is not the person who started the server, so its start URL proves nothing about what
the runs may reach (``webagent run`` takes a local start URL as leave to reach local addresses):

* only ``http:`` and ``https:`` URLs are opened -- ``file:`` (the server's own files), ``about:``,
  ``data:`` and the rest are refused whatever the configuration says;
* a private, loopback or link-local start URL (``127.0.0.1``, ``10.0.0.5``, ``169.254.169.254``,
  ``localhost``, a name that resolves to one of those, any spelling of them) is refused unless
  the server was started with ``--private-network allow`` or an ``--allow-domain`` entry that
  names the host;
* the run or session gets the policy of its start URL built that way: ``file:`` URLs stay
  refused for its whole life, and ``private_network = "auto"`` keeps private addresses refused.
"""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

from ..agent import Agent
from ..errors import InputError, NavigationError
from ..safety import NavigationPolicy
from ..urls import normalize_url

__all__ = ["WEB_SCHEMES", "checked_start"]

WEB_SCHEMES = ("http", "https")
_PRIVATE_HINT = (
    "the MCP server opens private and loopback addresses only when it is started with an "
    "--allow-domain entry naming the host (e.g. --allow-domain {host}) or with --private-network allow"
)


async def checked_start(agent: Agent, url: str) -> tuple[str, NavigationPolicy]:
    """The normalised start URL and the navigation policy of its run or session; InputError for a
    URL that is not http(s), NavigationError (one line, saying how to allow it) for one refused."""
    url = normalize_url(url)
    parts = urlsplit(url)
    if parts.scheme not in WEB_SCHEMES:
        raise InputError(f"the MCP server opens http and https URLs only; {parts.scheme}: URLs are refused ({url})")
    policy = agent.navigation_policy(url, trust_start=False)
    reason = await policy.check_resolved(url, navigation=True)
    if reason is None:
        return url, policy
    public_only = dataclasses.replace(policy, block_private=False, _resolved={})
    if policy.block_private and public_only.check(url, navigation=True) is None:
        host = parts.netloc.rpartition("@")[2]
        raise NavigationError(f"cannot open {url}: {reason}; " + _PRIVATE_HINT.format(host=host))
    raise NavigationError(f"cannot open {url}: {reason}; check the server's allowed_domains/blocked_domains")
