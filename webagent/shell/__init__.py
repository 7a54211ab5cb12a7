"""``webagent session`` and ``webagent skill``: a browser that outlives each shell command, for
coding agents (docs/shell.md). A per-user background process (``daemon``) keeps the sessions behind
a Unix socket in a private runtime directory; each command is one request (``client``)."""

from __future__ import annotations

from .protocol import EXIT_BAD, EXIT_BLOCKED, EXIT_FAILED, EXIT_NO_BROWSER, EXIT_OK, EXIT_STALE, EXIT_UNCHANGED

__all__ = ["EXIT_BAD", "EXIT_BLOCKED", "EXIT_FAILED", "EXIT_NO_BROWSER", "EXIT_OK", "EXIT_STALE", "EXIT_UNCHANGED"]
