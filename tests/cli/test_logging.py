"""The CLI's log lines (structlog's and the standard library's, tracebacks too) show a page's or a
model's control characters as escapes: nothing in a log line acts on the terminal."""

from __future__ import annotations

import subprocess
import sys

PROGRAM = r"""
import logging, structlog
from webagent.cli.main import configure_logging
configure_logging(1)
log = structlog.get_logger("webagent.test")
log.warning("page_event", text="dialog \x1b]0;pwned\x07 \x1b[2J \u009b2J", count=3)
logging.getLogger("webagent.sdk").warning("stdlib \x1b[2J")
try:
    raise RuntimeError("boom \x1b]52;c;Y2xpcA==\x07")
except RuntimeError:
    log.exception("task_crashed")
raise ValueError("a bug, its message quoting a page: \x1b[2J")
"""


def test_log_lines_show_control_characters_as_escapes() -> None:
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, timeout=60)
    err = proc.stderr
    assert proc.returncode == 1, err.decode(errors="replace")  # the uncaught error at the end
    assert b"\x1b" not in err and b"\x07" not in err and "\u009b".encode() not in err, err
    text = err.decode()
    # (a value with spaces is shown quoted by structlog's renderer: its backslashes doubled)
    assert r"dialog \\x1b]0;pwned\\x07 \\x1b[2J \\x9b2J" in text and "count=3" in text
    assert r"stdlib \x1b[2J" in text
    assert r"RuntimeError: boom \x1b]52;c;Y2xpcA==\x07" in text and "Traceback" in text
    assert r"ValueError: a bug, its message quoting a page: \x1b[2J" in text
