"""The CLI's human hand-off: the policy's ``ask_user`` asked on the terminal.

Only when standard input is a terminal (``terminal_asker`` returns None otherwise: the run then
ends with stop reason ``needs_human``, saying what it needed). The question goes to stderr, its
control characters shown as escapes (``terminal_text``: a page can steer what the model asks); the
answer is the next line typed, read without blocking the event loop (the run's browser stays
open meanwhile); an empty line, end of input or Ctrl-D is no answer.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from ..inputs import terminal_text
from ..loop import HumanHandler, HumanRequest

__all__ = ["terminal_asker"]


def terminal_asker(stdin: TextIO | None = None, stderr: TextIO | None = None) -> HumanHandler | None:
    """A handler asking on the terminal, or None when ``stdin`` (default ``sys.stdin``) is not one."""
    source = stdin or sys.stdin
    out = stderr or sys.stderr
    try:
        interactive = source.isatty()
    except (AttributeError, ValueError):
        interactive = False
    if not interactive:
        return None

    async def ask(request: HumanRequest) -> str | None:
        asked = f"webagent needs you (step {request.step}, {request.url}):\n  {request.question}"
        out.write(f"\n{terminal_text(asked)}\n> ")
        out.flush()
        line = await _read_line(source)
        return line.strip() or None

    return ask


async def _read_line(source: TextIO) -> str:
    """The next line of ``source``, read when the terminal has one (the loop keeps running)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[str] = loop.create_future()
    fd = source.fileno()

    def ready() -> None:
        if not done.done():
            done.set_result(source.readline())

    loop.add_reader(fd, ready)
    try:
        return await done
    finally:
        loop.remove_reader(fd)
