"""The command line (``webagent``): the parser and the dispatch to each feature's command."""

from .main import configure_logging, main
from .parser import build_parser, config_from_args

__all__ = ["build_parser", "config_from_args", "configure_logging", "main"]
