"""Who chose a run's start URL, and what that lets the run reach.

``webagent run``, the library and a trusted task file speak for the operator: a local start URL
is leave to reach local addresses (``private_network = "auto"``), a ``file:`` start to open files.
Everyone else's start URL proves nothing (docs/security.md, "Who is trusted where"):

* **a client** of a server of ours (``webagent mcp``, ``webagent env serve``): only ``http:`` and
  ``https:`` URLs are opened; a private, loopback or link-local one (any spelling, or a name that
  resolves to one) is refused unless the operator allowed it (``--private-network allow``, or an
  ``--allow-domain`` entry naming the host); ``file:`` stays refused for the run's whole life
  (``client_start``);
* **a task or suite file** the operator did not mark trusted: ``http(s)`` only, and a local start
  lets the run reach that one ``host:port``, never every local address (``data_start``);
* **a task set's own server** (MiniWoB++ pages served by webagent): that one ``host:port``
  (``task_set_policy``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..errors import InputError, NavigationError
from ..guard.hosts import url_host
from ..guard.navigation import NavigationPolicy, is_local_url
from ..guard.urls import normalize_url

if TYPE_CHECKING:
    from .core import Runtime

__all__ = ["CLIENT_SCHEMES", "client_start", "data_start", "host_port", "task_set_policy"]

#: The schemes a start URL chosen by anyone but the operator may have.
CLIENT_SCHEMES = ("http", "https")
_PRIVATE_HINT = (
    "{server} opens private and loopback addresses only when it is started with an "
    "--allow-domain entry naming the host (e.g. --allow-domain {host}) or with --private-network allow"
)


def host_port(url: str) -> str | None:
    """``host:port`` of an http(s) URL as the policy reads it (``[::1]:80`` for IPv6); None otherwise."""
    parsed = url_host(url)
    if parsed is None:
        return None
    _, host, port = parsed
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _web_url(url: str, who: str) -> str:
    url = normalize_url(url)
    scheme = urlsplit(url).scheme
    if scheme not in CLIENT_SCHEMES:
        raise InputError(f"{who} opens http and https URLs only; {scheme}: URLs are refused ({url})")
    return url


async def client_start(runtime: Runtime, url: str, *, server: str = "the server") -> tuple[str, NavigationPolicy]:
    """The normalised start URL a client sent and the navigation policy of its run or session;
    InputError for a URL that is not http(s), NavigationError (one line, saying how to allow it)
    for one refused. ``server`` names the server in the messages (``the MCP server``)."""
    url = _web_url(url, server)
    policy = runtime.navigation_policy(url, trust_start=False)
    reason = await policy.check_resolved(url, navigation=True)
    if reason is None:
        return url, policy
    public_only = dataclasses.replace(policy, block_private=False, _resolved={})
    if policy.block_private and public_only.check(url, navigation=True) is None:
        host = urlsplit(url).netloc.rpartition("@")[2]
        hint = _PRIVATE_HINT.format(server=server, host=host)
        raise NavigationError(f"cannot open {url}: {reason}; {hint}")
    raise NavigationError(f"cannot open {url}: {reason}; check the server's allowed_domains/blocked_domains")


def data_start(runtime: Runtime, url: str, *, where: str = "a task file") -> NavigationPolicy:
    """The navigation policy of a run whose start URL comes from a task or suite file the operator
    did not mark trusted: ``http(s)`` only (InputError otherwise), and a local start is that one
    ``host:port``, not leave to reach every local address."""
    url = _web_url(url, f"{where} that is not trusted (--trust-tasks)")
    local = host_port(url) if is_local_url(url) else None
    return runtime.navigation_policy(url, trust_start=False, local_hosts=[local] if local else [])


def task_set_policy(runtime: Runtime, url: str) -> NavigationPolicy:
    """The navigation policy of a benchmark task served by webagent itself at ``url``: its server
    as that one ``host:port``, nothing else local, no ``file:``."""
    local = host_port(url)
    return runtime.navigation_policy(url, trust_start=False, local_hosts=[local] if local else [])
