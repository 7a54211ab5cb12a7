"""``webagent fake-server`` and ``webagent sites``: the offline model server and the bundled local
sites, served on 127.0.0.1 for tests, demos and pipelines (``webagent.testing``)."""

from __future__ import annotations

import argparse

from ..families import FAMILIES
from .commands import ConfigOptions, LoadConfig

__all__ = ["FAKE_SERVER", "SITES"]


class FakeServerCommand:
    """``webagent fake-server``: the offline OpenAI-compatible model server."""

    name = "fake-server"
    help = "serve the offline OpenAI-compatible model server"

    def add_arguments(self, parser: argparse.ArgumentParser, config_options: ConfigOptions) -> None:
        parser.description = "Play the three model roles from a script on 127.0.0.1 (for tests and pipelines)."
        parser.add_argument("--script", required=True, metavar="FILE", help="JSON script (see docs/offline-server.md)")
        parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
        parser.add_argument(
            "--family",
            choices=list(FAMILIES),
            help="image-token family of the models served, for the simulated prefix cache (default: told by each "
            "request's model name)",
        )

    def run(self, args: argparse.Namespace, config: LoadConfig) -> int:
        from ..testing.server import main

        family = ["--family", args.family] if args.family else []
        return main(["--script", args.script, "--port", str(args.port), *family])


class SitesCommand:
    """``webagent sites``: the bundled local task sites."""

    name = "sites"
    help = "serve the bundled local task sites on 127.0.0.1"

    def add_arguments(self, parser: argparse.ArgumentParser, config_options: ConfigOptions) -> None:
        parser.description = "Serve the local websites under webagent/testing/data/sites for tests and demos."
        parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")

    def run(self, args: argparse.Namespace, config: LoadConfig) -> int:
        from ..testing.sites import main

        return main(["--port", str(args.port)])


FAKE_SERVER = FakeServerCommand()
SITES = SitesCommand()
