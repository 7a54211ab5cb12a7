"""What ``stepcpu.py`` measures inside its own process: Python phases (py-spy) and messages.

``Profiler`` runs py-spy on this process (``--profile``) and shares its samples out by phase: each
sample goes to the innermost frame a rule of ``PHASES`` knows (``phase_of``), samples of the event
loop waiting for I/O (``IDLE``) left out. ``Messages`` counts, while a phase runs, the commands this
process sends over its direct DevTools connection and through Playwright and the events it receives
from each, by method (``SHOTS``: the screenshots sent, what a step's counts are divided by).
"""

from __future__ import annotations

import collections
import functools
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from procmeter import cpu_s

__all__ = ["IDLE", "PHASES", "SHOTS", "Messages", "Profiler", "phase_of"]

#: Python phases: (name, what a frame's file path contains), tried from the innermost frame out; the first
#: frame a rule matches names the sample's phase. Libraries not named here (json, pydantic, base64, ...)
#: count for the webagent frame that called them.
PHASES: list[tuple[str, tuple[str, ...]]] = [
    ("logging", ("structlog/", "/logging/")),
    (
        "DevTools connection (websocket)",
        ("aiohttp/_websocket", "aiohttp/client_ws", "webagent/browser/devtools.py", "webagent/browser/tunnels.py"),
    ),
    (
        "request encoding, reply parsing",
        (
            "webagent/model/wire.py",
            "webagent/model/parsing.py",
            "webagent/model/replies.py",
            "webagent/model/schema.py",
        ),
    ),
    (
        "HTTP client (openai SDK, aiohttp)",
        ("openai/", "httpx/", "httpcore/", "aiohttp/client", "aiohttp/http", "webagent/model/"),
    ),
    ("screenshot", ("webagent/browser/capture.py", "webagent/images.py")),
    ("settle", ("webagent/browser/settle.py", "webagent/browser/load.py", "webagent/browser/deadline.py")),
    (
        "navigation tracking, tabs, guard",
        (
            "webagent/browser/targets.py",
            "webagent/browser/tabs.py",
            "webagent/browser/guard.py",
            "webagent/browser/interception.py",
            "webagent/browser/netrules.py",
            "webagent/browser/refusals.py",
            "webagent/browser/state.py",
            "webagent/browser/faults.py",
        ),
    ),
    ("actions (input)", ("webagent/browser/control.py", "webagent/actions.py", "webagent/inputs.py")),
    ("browser session, pool", ("webagent/browser/",)),
    ("prompts, roles", ("webagent/roles/", "webagent/prompts.py", "webagent/families/", "jinja2/")),
    (
        "trajectory, report writing",
        (
            "webagent/runs/",
            "webagent/record/",
            "webagent/records.py",
            "webagent/files/",
            "webagent/stream.py",
        ),
    ),
    ("watchdog", ("webagent/batch/watchdog.py",)),
    ("admission, batch", ("webagent/batch/", "webagent/budget.py")),
    ("agent loop", ("webagent/loop/", "webagent/agent.py", "webagent/")),
    ("Playwright client", ("playwright/",)),
    ("benchmark's own (floor loop)", ("benchmarks/",)),
    ("event loop, other", ("",)),
]


#: The leaf frame of a sample taken while the event loop waits for I/O (not work: left out).
IDLE = ("EpollSelector.select (", "PollSelector.select (", "SelectSelector.select (")


def phase_of(stack: list[str]) -> str:
    for frame in reversed(stack):
        path = frame.rsplit("(", 1)[-1]
        for name, marks in PHASES[:-1]:
            if any(mark in path for mark in marks):
                return name
    return PHASES[-1][0]


class Profiler:
    """py-spy sampling this process (raw collapsed stacks), or nothing when ``rate`` is 0."""

    def __init__(self, rate: int, out: Path) -> None:
        self.rate, self.out, self.proc = rate, out, None
        self.cpu_s = 0.0

    def start(self) -> None:
        if self.rate and self.proc is None:
            args = ["py-spy", "record", "--pid", str(os.getpid()), "-r", str(self.rate), "-f", "raw"]
            exe = Path(sys.executable).with_name("py-spy")
            args[0] = str(exe) if exe.exists() else "py-spy"
            try:
                self.proc = subprocess.Popen(
                    [*args, "--nonblocking", "-o", str(self.out)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            except FileNotFoundError:
                raise SystemExit("--profile needs py-spy: pip install py-spy") from None
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline()  # "py-spy> Sampling process ...": attached
            if "Sampling" not in line:
                raise SystemExit(f"py-spy did not start: {line.strip()} {self.proc.communicate()[0][-500:]}")

    def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.cpu_s = cpu_s(self.proc.pid)
        self.proc.send_signal(signal.SIGINT)
        self.proc.communicate(timeout=60)

    def phases(self) -> collections.Counter[str]:
        counts: collections.Counter[str] = collections.Counter()
        if self.proc is None or not self.out.exists():
            return counts
        for line in self.out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if (
                stack and count.isdigit() and not stack.rsplit(";", 1)[-1].startswith(IDLE)
            ):  # (--nonblocking counts waits too)
                counts[phase_of(stack.split(";"))] += int(count)
        return counts


SHOTS = "screenshots"


@functools.cache
def _script(expression: str) -> str:
    """The name of a script of ``webagent.browser.scripts`` sent as ``expression`` (looked up once
    per script: the count runs in the measured process)."""
    from webagent.browser import scripts

    names = [k for k, v in vars(scripts).items() if k.isupper() and v == expression]
    return names[0] if names else expression[:24]


def _caller() -> str:
    """The two innermost webagent functions (outside the DevTools connection) up the calling stack."""
    names: list[str] = []
    frame = sys._getframe(2)
    while frame is not None and len(names) < 2:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("webagent.") and not module.endswith(".devtools"):
            names.append(frame.f_code.co_qualname)
        frame = frame.f_back  # type: ignore[assignment]
    return " < ".join(names) or "?"


class Messages:
    """Messages per step, by kind and method: the commands this process sends over its direct DevTools
    connection and through Playwright, and the events it receives from each (patched in for a phase)."""

    def __enter__(self) -> Messages:
        from playwright._impl.connection import Connection

        from webagent.browser.devtools import DevTools, DevToolsSession

        self.counts: collections.Counter[str] = collections.Counter()
        counts = self.counts
        self._saved = [
            (DevTools, "request", DevTools.request),
            (DevToolsSession, "dispatch", DevToolsSession.dispatch),
            (Connection, "send_message_to_server", Connection.send_message_to_server),
            (Connection, "dispatch", Connection.dispatch),
        ]
        request, dispatch, send, receive = (f for _, _, f in self._saved)

        def counted_request(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
            counts[f"CDP command {method}"] += 1
            if method == "Page.captureScreenshot":
                counts[SHOTS] += 1
            elif method == "Runtime.evaluate":  # which script, asked by whom (the ones that cost a frame)
                params = (args[0] if args else kwargs.get("params")) or {}
                counts[f"  Runtime.evaluate {_script(params.get('expression', ''))} from {_caller()}"] += 1
            return request(self, method, *args, **kwargs)

        def counted_dispatch(self: Any, method: str, params: Any) -> None:
            counts[f"CDP event {method}"] += 1
            dispatch(self, method, params)

        def counted_send(self: Any, obj: Any, method: str, *args: Any) -> Any:
            counts[f"Playwright call {type(obj).__name__}.{method}"] += 1
            if method == "send" and args and (args[0] or {}).get("method") == "Page.captureScreenshot":
                counts[SHOTS] += 1
            return send(self, obj, method, *args)

        def counted_receive(self: Any, message: dict[str, Any]) -> None:
            if message.get("id") is None:
                counts[f"Playwright event {message.get('method')}"] += 1
            receive(self, message)

        DevTools.request = counted_request  # type: ignore[method-assign]
        DevToolsSession.dispatch = counted_dispatch  # type: ignore[method-assign]
        Connection.send_message_to_server = counted_send  # type: ignore[method-assign]
        Connection.dispatch = counted_receive  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, f in self._saved:
            setattr(owner, name, f)
