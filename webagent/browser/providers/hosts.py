"""The ``hosts`` provider: a static list of browser hosts (``[[browser.hosts]]``), each lent once
at a time, with its token read from a secret."""

from __future__ import annotations

from ...config import BrowserHost
from ...errors import ConfigError
from ...guard.secrets import Secrets
from .base import BrowserProvider, Lease

__all__ = ["HostsProvider"]


class HostsProvider(BrowserProvider):
    """Lends each configured host in turn; a host released is lent again."""

    name = "hosts"
    eager = True

    def __init__(self, hosts: list[BrowserHost], secrets: Secrets) -> None:
        self._leases: list[Lease] = []
        for i, host in enumerate(hosts):
            headers: dict[str, str] = {}
            if host.token_secret is not None:
                if host.token_secret not in secrets.names:
                    raise ConfigError(
                        f"browser.hosts[{i}].token_secret names {host.token_secret}, which is not a secret: "
                        f"give it in [secrets] {host.token_secret} = ..., WEBAGENT_SECRET_{host.token_secret} "
                        "or --secret"
                    )
                value, _ = secrets.substitute("{{" + host.token_secret + "}}")
                headers[host.token_header] = host.token_prefix + value
            self._leases.append(Lease(host.label, host.url, host.sessions, host.protocol, headers))
        self._lent: set[int] = set()

    async def acquire(self, *, timeout_s: float) -> Lease | None:
        for i, lease in enumerate(self._leases):
            if i not in self._lent:
                self._lent.add(i)
                return lease
        return None

    async def release(self, lease: Lease, *, timeout_s: float) -> None:
        self._lent.discard(next((i for i, x in enumerate(self._leases) if x is lease), -1))
