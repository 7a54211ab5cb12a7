"""``[run]``: what every run records besides its run directory's trajectory, result and report."""

from __future__ import annotations

from pydantic import Field

from ._base import Section

__all__ = ["RunSettings"]


class RunSettings(Section):
    har: bool = Field(
        default=False,
        description="Write the run's network as network.har in its run directory (Playwright's HAR, bodies "
        "embedded; secrets, cookie and Authorization values redacted); a context of the run's own only",
    )
