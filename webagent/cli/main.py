"""The command line: ``webagent run``, ``batch``, ``test``, ``export``, ``mcp``, ``demo`` and the
offline test servers — dispatch only; each command lives with its feature (``webagent.cli.commands``).

Exit codes: 0 = validated success, 1 = task not accomplished, 2 = usage or configuration error.
This is the only module that configures logging. What it prints -- its error messages, every log
line -- goes through ``terminal_text``: an error can quote a page's URL or a task file's id, a log
line a page's words.
"""

from __future__ import annotations

import io
import logging
import sys
import traceback
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import structlog
from structlog.typing import ExcInfo

from ..errors import BrowserError, ConfigError, InputError, NavigationError, WebAgentError
from ..guard.secrets import redact_log_event
from ..inputs import terminal_text
from .commands import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE
from .parser import build_parser, cli_option, config_from_args, registered
from .run import default_output

__all__ = ["configure_logging", "default_output", "main", "terminal_log_event"]


class _TerminalFormatter(logging.Formatter):
    """The standard library's log lines (the SDKs', the browser driver's), shown as ``terminal_text``."""

    def format(self, record: logging.LogRecord) -> str:
        return terminal_text(super().format(record))


def terminal_log_event(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """A structlog processor: every text of a log event as ``terminal_text`` (a value that is not
    text is shown by its ``repr``, which escapes control characters already)."""
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = terminal_text(value)
    return event


def _traceback(out: TextIO, exc_info: ExcInfo) -> None:
    """A log event's traceback, plain and as ``terminal_text`` (an exception's message may quote a page)."""
    text = io.StringIO()
    structlog.dev.plain_traceback(text, exc_info)
    out.write(terminal_text(text.getvalue()))


def _uncaught(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    """A traceback that reaches the top (a bug), shown as ``terminal_text`` like everything else."""
    sys.stderr.write(terminal_text("".join(traceback.format_exception(kind, exc, tb))))


def configure_logging(verbosity: int) -> None:
    level = logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG
    sys.excepthook = _uncaught
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_TerminalFormatter("%(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    for name in ("httpx2", "openai"):  # httpx2 logs every model request at INFO: shown from -vv only
        logging.getLogger(name).setLevel(logging.WARNING if verbosity <= 1 else logging.DEBUG)
    structlog.configure(
        processors=[
            redact_log_event,  # no secret value in any log line
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="%H:%M:%S"),
            terminal_log_event,  # no control character a page or a model wrote acts on the terminal
            structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty(), exception_formatter=_traceback),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["session"]:  # a shell's step: not worth building every command's parser
        from ..shell.cli import quick_session

        quick = quick_session(words[1:])
        if quick is not None:
            return quick
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    configure_logging(getattr(args, "verbose", 0))
    try:
        output = getattr(args, "output", None)
        if output and Path(output).exists() and not Path(output).is_dir():
            raise InputError(f"--output {output} is a file; give a directory (it is created if missing)")
        command = next(c for c in registered() if c.name == args.command)
        return command.run(args, lambda: config_from_args(args))
    except ConfigError as exc:
        print(terminal_text(f"webagent: error: {exc.worded(cli_option)}"), file=sys.stderr)
        return EXIT_USAGE
    except (InputError, NavigationError, BrowserError) as exc:
        print(terminal_text(f"webagent: error: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except WebAgentError as exc:
        print(terminal_text(f"webagent: error: {exc}"), file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("webagent: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
