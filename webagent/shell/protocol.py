"""The socket's wire: one JSON line each way, a ``Request`` and its ``Reply``, and the exit codes.

Exit codes (what every command ends with, ``Reply.code``): 0 done; 1 a goal not accomplished or a
check that does not hold; 2 bad input or a page error; 3 nothing changed; 4 a stale ref, a covered
target or a frozen page; 5 a bot challenge; 6 no browser.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

__all__ = [
    "EXIT_BAD",
    "EXIT_BLOCKED",
    "EXIT_FAILED",
    "EXIT_NO_BROWSER",
    "EXIT_OK",
    "EXIT_STALE",
    "EXIT_UNCHANGED",
    "LINE_LIMIT",
    "PROTOCOL_VERSION",
    "Reply",
    "Request",
    "ShellError",
]

EXIT_OK, EXIT_FAILED, EXIT_BAD, EXIT_UNCHANGED, EXIT_STALE, EXIT_BLOCKED, EXIT_NO_BROWSER = 0, 1, 2, 3, 4, 5, 6
#: The longest line either side reads (a page's text, a screenshot's path: far less).
LINE_LIMIT = 16 * 1024 * 1024
PROTOCOL_VERSION = 1


class Request(BaseModel):
    """One command for the background process."""

    model_config = ConfigDict(extra="forbid")

    version: int = PROTOCOL_VERSION
    command: str = Field(min_length=1, max_length=40)
    session: str = Field(default="default", max_length=64)
    args: dict[str, JsonValue] = {}
    #: ``start`` only: the session's configuration (``batch.worker.config_payload``, secrets' values in it).
    config: dict[str, Any] | None = None


class Reply(BaseModel):
    """What a command did: its exit code, its text for a terminal, its data for ``--json``."""

    code: int = EXIT_OK
    text: str = ""
    data: dict[str, Any] = {}


class ShellError(Exception):
    """A command that fails with ``code`` and a one-line message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
