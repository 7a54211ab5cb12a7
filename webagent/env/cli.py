"""``webagent env serve``: the OpenEnv server (``webagent.env.openenv``) on HOST:PORT."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from typing import Any

from ..config import AgentConfig
from ..errors import ConfigError, InputError

__all__ = ["READY_PREFIX", "add_env_parser", "run_env"]

#: What ``serve`` prints on stderr once it listens (then its base URL).
READY_PREFIX = "webagent env: OpenEnv server on "


def add_env_parser(sub: Any, add_config_options: Any) -> None:
    env = sub.add_parser(
        "env",
        help="serve webagent's RL environment to trainers (OpenEnv)",
        description="Environments for RL trainers. 'serve' runs the OpenEnv server (openenv-core's: /health, "
        "/schema, /reset, /step, /state and the /ws WebSocket its clients use), many sessions on one browser "
        "pool. Needs the rl extra: pip install 'webagent[rl]'. See docs/training.md.",
    )
    env_sub = env.add_subparsers(dest="env_command", metavar="COMMAND", required=True)
    serve = env_sub.add_parser(
        "serve",
        help="serve the OpenEnv HTTP and WebSocket API",
        description="Serve WebEnv sessions over openenv-core's server: reset with {'task': 'miniwob/click-button', "
        "'seed': 3} or a web task {'task': {'url', 'goal'}}, step with {'reply': ...} or {'action': {...}, "
        "'point': [x, y]}. An infrastructure failure is an error answer (the rollout is dropped), never a reward.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one, printed on stderr)")
    serve.add_argument(
        "--max-sessions", type=int, default=64, metavar="N", help="WebSocket sessions at once (default 64)"
    )
    serve.add_argument(
        "--idle-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="close a session's browser context after this long without a call (default 300; 0: never)",
    )
    serve.add_argument(
        "--reward",
        choices=["task", "validator", "reference", "both"],
        default="task",
        help="reward of web tasks (benchmark tasks are always rewarded by their page); 'task' (the default) "
        "serves benchmark tasks only and needs no model endpoint",
    )
    add_config_options(serve)


def run_env(args: argparse.Namespace, config: AgentConfig) -> int:
    if args.max_sessions < 1:
        raise InputError("--max-sessions must be at least 1")
    if args.idle_timeout < 0:
        raise InputError("--idle-timeout must be 0 (never) or a number of seconds")
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port must be between 0 and 65535 (got {args.port})")
    if os.environ.get("ENABLE_WEB_INTERFACE", "").lower() not in ("1", "true", "yes"):
        # openenv-core imports gradio for its optional web UI even when it is off: seconds of start-up.
        sys.modules.setdefault("gradio", None)  # type: ignore[arg-type]
    try:
        import uvicorn

        from .openenv import build_app
    except ModuleNotFoundError as exc:
        raise ConfigError("webagent env serve needs openenv-core: pip install 'webagent[rl]'") from exc
    app = build_app(
        config, max_sessions=args.max_sessions, reward=args.reward, idle_timeout_s=args.idle_timeout or None
    )
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((args.host, args.port))
        sock.listen(2048)  # connections wait here until the server takes them
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_max_size=2**27))
    print(f"{READY_PREFIX}http://{shown}:{port}", file=sys.stderr, flush=True)
    asyncio.run(server.serve(sockets=[sock]))
    return 0
