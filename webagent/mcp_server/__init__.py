"""``webagent mcp``: webagent as a tool for other agents, on the official MCP Python SDK.

Tools: ``run_task`` (a URL and a goal in, the validated answer, stop reason and run directory
out), ``open_session`` / ``close_session`` (a browser session kept between calls), and on a
session ``act``, ``check``, ``extract`` (``webagent.pilot``) and ``screenshot`` (an MCP image).
Transports: stdio (the default) and streamable HTTP (``--http HOST:PORT``).

``server.py`` is the server (``WebagentMCP``), ``tools.py`` the tools and their results,
``sessions.py`` the kept sessions, ``cli.py`` the command; what a client may open is
``webagent.runtime.access``'s, who may talk to it over HTTP ``webagent.serving``'s. Needs the ``mcp`` extra
(``pip install 'webagent[mcp]'``): the SDK is imported only when ``WebagentMCP`` is first used,
so that ``webagent mcp`` without it is a one-line error; nothing else in the package imports
this folder.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .server import WebagentMCP

__all__ = ["WebagentMCP"]


def __getattr__(name: str) -> Any:
    if name == "WebagentMCP":
        from .server import WebagentMCP

        return WebagentMCP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
