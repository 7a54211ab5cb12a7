"""``webagent env serve``: the OpenEnv server (``webagent.env.openenv``) on HOST:PORT, behind the gate
(``webagent.serving.gate``: Host, Origin, bearer tokens on HTTP and on ``/ws``) and the session bounds
(``webagent.env.bounds``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from collections.abc import Callable
from types import ModuleType
from typing import cast

from ..budget import Budget, BudgetLimits
from ..config import AgentConfig
from ..errors import ConfigError, InputError
from ..serving.tokens import ENV_TOKEN_ENV, add_token_options, read_tokens, require_token

__all__ = ["COMMAND", "READY_PREFIX", "TOKEN_ENV", "add_env_arguments", "run_env"]

#: What ``serve`` prints on stderr once it listens (then its base URL).
READY_PREFIX = "webagent env: OpenEnv server on "
#: The environment variable that holds the bearer token (read without ``--auth-token`` and ``--auth-token-file``).
TOKEN_ENV = ENV_TOKEN_ENV
#: The largest WebSocket message a client may send (bytes): a reset or a step.
WS_MAX_SIZE = 8 << 20


def add_env_arguments(
    env: argparse.ArgumentParser, add_config_options: Callable[[argparse.ArgumentParser], None]
) -> None:
    """``webagent env``'s description and its ``serve`` command."""
    env.description = (
        "Environments for RL trainers. 'serve' runs the OpenEnv server (openenv-core's: /health, "
        "/schema, /reset, /step, /state and the /ws WebSocket its clients use), many sessions on one browser "
        "pool. Needs the rl extra: pip install 'webagent[rl]'. See docs/training.md."
    )
    env_sub = env.add_subparsers(dest="env_command", metavar="COMMAND", required=True)
    serve = env_sub.add_parser(
        "serve",
        help="serve the OpenEnv HTTP and WebSocket API",
        description="Serve WebEnv sessions over openenv-core's server: reset with {'task': 'miniwob/click-button', "
        "'seed': 3} or a web task {'task': {'url', 'goal'}} (http(s) only; private addresses only when allowed), "
        "or with no task to draw the next of --tasks; step with {'reply': ...} or {'action': {...}, 'point': "
        "[x, y]}. An infrastructure failure (a spent --server-budget-* included) is an error answer (the rollout is "
        "dropped), never a reward. Host and Origin are checked on HTTP and /ws; a bearer token is asked when "
        f"one is set ({TOKEN_ENV}, --auth-token-file or --auth-token), and required when bound beyond loopback.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one, printed on stderr)")
    add_token_options(serve, env=TOKEN_ENV)
    serve.add_argument(
        "--max-sessions", type=int, default=64, metavar="N", help="sessions at once, all clients (default 64)"
    )
    serve.add_argument(
        "--max-sessions-per-client",
        type=int,
        metavar="N",
        help="sessions at once of one client: its token when --auth-token-file holds several, else its "
        "address (default: --max-sessions)",
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
    serve.add_argument(
        "--tasks",
        metavar="SET|FILE",
        help="default tasks, drawn by a reset that names none: a task set ('miniwob': every MiniWoB++ task) "
        "or a task file (JSON lines, as webagent batch reads them)",
    )
    serve.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the sequence --tasks are drawn in, pages' seeds included (default 0)",
    )
    serve.add_argument(
        "--server-budget-calls",
        type=int,
        metavar="N",
        help="model calls of the whole server, all sessions together (--budget-calls bounds each episode)",
    )
    serve.add_argument("--server-budget-tokens", type=int, metavar="N", help="model tokens of the whole server")
    serve.add_argument(
        "--server-budget-usd", type=float, metavar="USD", help="dollars of the whole server (at the config's prices)"
    )
    add_config_options(serve)


def _checked(args: argparse.Namespace) -> None:
    if args.max_sessions < 1:
        raise InputError("--max-sessions must be at least 1")
    if args.max_sessions_per_client is not None and args.max_sessions_per_client < 1:
        raise InputError("--max-sessions-per-client must be at least 1")
    if args.idle_timeout < 0:
        raise InputError("--idle-timeout must be 0 (never) or a number of seconds")
    if not 0 <= args.port <= 65535:
        raise InputError(f"--port must be between 0 and 65535 (got {args.port})")
    for flag in ("server_budget_calls", "server_budget_tokens", "server_budget_usd"):
        if (getattr(args, flag) or 0) < 0:
            raise InputError(f"--{flag.replace('_', '-')} must be 0 or more")


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)  # connections wait here until the server takes them
    except OSError as exc:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def run_env(args: argparse.Namespace, config: AgentConfig) -> int:
    _checked(args)
    tokens = read_tokens(args.auth_token, args.auth_token_file, TOKEN_ENV)
    if os.environ.get("ENABLE_WEB_INTERFACE", "").lower() not in ("1", "true", "yes"):
        # openenv-core imports gradio for its optional web UI even when it is off: seconds of start-up.
        # None in sys.modules makes an import fail at once (the import system's own convention, which
        # typeshed's dict[str, ModuleType] does not spell): the values as the import system reads them.
        cast("dict[str, ModuleType | None]", sys.modules).setdefault("gradio", None)
    try:
        import uvicorn

        from ..serving.gate import HTTPGate
        from .bounds import SessionBounds
        from .core import shared_agent
        from .openenv import build_app
    except ModuleNotFoundError as exc:
        raise ConfigError("webagent env serve needs openenv-core: pip install 'webagent[rl]'") from exc
    from .deck import TaskDeck

    deck = TaskDeck.load(args.tasks, seed=args.seed) if args.tasks else None
    if deck is not None:
        deck.check(args.reward)
    sock = _listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    try:
        require_token(str(host), tokens, url=url, env=TOKEN_ENV, loopback="--host 127.0.0.1")
    except InputError:
        sock.close()
        raise
    agent = shared_agent(config, reward=args.reward)
    limits = BudgetLimits(calls=args.server_budget_calls, tokens=args.server_budget_tokens, usd=args.server_budget_usd)
    hint = "webagent env serve's --server-budget-* limits"
    budgets = [Budget(limits, agent.runtime.price, scope="server", hint=hint)] if limits.active else []
    app = build_app(
        config,
        max_sessions=args.max_sessions,
        reward=args.reward,
        idle_timeout_s=args.idle_timeout or None,
        agent=agent,
        deck=deck,
        budgets=budgets,
    )
    bounded = SessionBounds(app, total=args.max_sessions, per_client=args.max_sessions_per_client or args.max_sessions)
    gated = HTTPGate(bounded, bind_host=args.host, tokens=tokens, realm="webagent env", public_paths=("/health",))
    server = uvicorn.Server(uvicorn.Config(gated, log_level="warning", ws_max_size=WS_MAX_SIZE))
    print(f"{READY_PREFIX}{url}", file=sys.stderr, flush=True)
    asyncio.run(server.serve(sockets=[sock]))
    return 0


class EnvCommand:
    """``webagent env serve``: the OpenEnv server."""

    name = "env"
    help = "serve webagent's RL environment to trainers (OpenEnv)"

    def add_arguments(
        self, parser: argparse.ArgumentParser, config_options: Callable[[argparse.ArgumentParser], None]
    ) -> None:
        add_env_arguments(parser, config_options)

    def run(self, args: argparse.Namespace, config: Callable[[], AgentConfig]) -> int:
        return run_env(args, config())


COMMAND = EnvCommand()
