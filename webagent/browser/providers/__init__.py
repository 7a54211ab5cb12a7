"""Browser providers: where a pool's browsers come from (``local``, ``hosts``, a plugin), and the
fleet pool that places sessions over their leases."""

from .base import BrowserProvider, Lease, ProviderError, reachable
from .factory import make_pool, provider_of
from .plugins import GROUP, installed, load_plugin
from .pool import FleetPool, HostFigures, session_host

__all__ = [
    "GROUP",
    "BrowserProvider",
    "FleetPool",
    "HostFigures",
    "Lease",
    "ProviderError",
    "installed",
    "load_plugin",
    "make_pool",
    "provider_of",
    "reachable",
    "session_host",
]
