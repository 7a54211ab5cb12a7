"""The command line's options: the parser of every command, and the config they make (the
precedence of flags over the environment over the config file is ``load_config``'s)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn

from .. import __version__
from ..config import ROLES, AgentConfig, load_config
from ..families import DEFAULT_PROFILE, FAMILIES, PROFILES
from ..serving.tokens import MCP_TOKEN_ENV, add_token_options
from .secretflags import SECRET_FLAGS, add_secret_options, secret_overrides
from .sessionflags import SESSION_FLAGS, add_session_options, session_overrides

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "cli_option",
    "config_from_args",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

_ROLE_FIELDS: list[tuple[str, str, Any]] = [
    ("base_url", "OpenAI-compatible base URL of the {role} model", str),
    ("model", "model name of the {role} model", str),
    ("api_key", "API key of the {role} endpoint", str),
    ("temperature", "sampling temperature of the {role} model", float),
    ("max_tokens", "max completion tokens of the {role} model", int),
    ("timeout_s", "request timeout of the {role} model, in seconds", float),
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"webagent: error: {message} (see '{self.prog} --help')\n")


def _add_ray_options(parser: argparse.ArgumentParser, what: str, positional: str) -> None:
    """``--trust-tasks`` and the Ray options of a command that runs a file of ``what``."""
    parser.add_argument(
        "--trust-tasks",
        action="store_true",
        help=f"{positional} is yours: its {what} may use secrets ({{{{NAME}}}}), signed-in states, upload folders, "
        "proxies and credentials, and a local or file: start opens what one of 'webagent run' does (without it "
        "the file is data: docs/security.md)",
    )
    parser.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help=f"fan the {what} out to Ray actors: a new local Ray instance, or the cluster at ADDRESS "
        f"('auto': the one `ray start` made here); put it after {positional}",
    )
    parser.add_argument(
        "--ray-actors",
        type=int,
        default=2,
        metavar="N",
        help="Ray actors, each running --concurrency sessions (default 2)",
    )


def _add_config_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        metavar="FILE",
        help="TOML config file ([policy] [localizer] [validator] [agent] [browser])",
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-v info, -vv debug) to stderr")
    p.add_argument("-q", "--quiet", action="store_true", help="do not print steps")
    g = p.add_argument_group("models (all roles at once; per-role flags win)")
    g.add_argument("--base-url", help="base URL for all three roles, e.g. http://localhost:8000/v1")
    g.add_argument("--model", help="model name for all three roles")
    g.add_argument("--api-key", help="API key for all three roles")
    for role in ROLES:
        g = p.add_argument_group(f"{role} model")
        for field, text, typ in _ROLE_FIELDS:
            g.add_argument(
                f"--{role}-{field.replace('_', '-')}",
                type=typ,
                metavar=field.upper(),
                help=text.format(role=role),
            )
        if role in ("policy", "validator"):
            g.add_argument(
                f"--{role}-family",
                choices=list(FAMILIES),
                help=f"{role} model family: its contract and what its requests ask of the server (a tile "
                "limit, reasoning switches; see docs/serving.md); unset, nothing is added",
            )
        if role == "policy":
            g.add_argument(
                "--policy-output",
                choices=["json", "tools"],
                help="how the policy replies: one JSON object, or native tool calls (default: the family's)",
            )
        if role == "localizer":
            g.add_argument(
                "--localizer-profile",
                "--profile",
                choices=list(PROFILES),
                help=f"coordinate convention of the localizer model family (default {DEFAULT_PROFILE})",
            )
    g = p.add_argument_group("agent")
    g.add_argument("--max-steps", type=int, help="steps in all, the last asking for the final answer (default 30)")
    g.add_argument("--max-attempts", type=int, help="answers the validator may judge (default 3)")
    g.add_argument("--max-time", type=float, metavar="SECONDS", help="time limit of the run (default 600)")
    g.add_argument("--screenshots", type=int, metavar="K", help="screenshots in each policy request (default 3)")
    g.add_argument(
        "--grounding",
        choices=["policy", "localizer"],
        help="who places clicks on the screenshot: the policy in its reply (one request a step) or the "
        "localizer (default: the policy family's)",
    )
    g.add_argument(
        "--max-actions-per-turn",
        type=int,
        metavar="N",
        help="actions one policy reply may carry, carried out in order up to the first that changes the page "
        "(default: the policy family's, 1)",
    )
    g.add_argument("--budget-calls", type=int, metavar="N", help="hard limit on model calls per run")
    g.add_argument("--budget-tokens", type=int, metavar="N", help="hard limit on tokens (all roles) per run")
    g.add_argument("--budget-usd", type=float, metavar="USD", help="hard limit on dollars per run (per-role prices)")
    g = p.add_argument_group("browser")
    g.add_argument("--headed", action="store_true", help="show the browser window (default headless)")
    g.add_argument(
        "--executable-path",
        metavar="PATH",
        help="Chromium binary (default: the system's chromium-headless-shell when headless and unguarded, "
        "else /usr/bin/chromium)",
    )
    g.add_argument("--viewport", metavar="WxH", help="viewport size in CSS pixels (default 1280x800)")
    g.add_argument("--ws-endpoint", metavar="URL", help="use a Playwright browser server (playwright run-server)")
    g.add_argument("--cdp-endpoint", metavar="URL", help="use a running Chromium's remote-debugging endpoint")
    g.add_argument(
        "--downloads",
        choices=["keep", "refuse"],
        help="what becomes of a file a page downloads: keep (default: saved in the run's downloads/ folder) "
        "or refuse (cancelled)",
    )
    g.add_argument("--max-downloads", type=int, metavar="N", help="downloads a run keeps at most (default 20)")
    g.add_argument(
        "--max-download-mb", type=float, metavar="MB", help="a larger download is cancelled (default 100 MiB)"
    )
    g = p.add_argument_group("safety (see the SECURITY section of the README)")
    g.add_argument(
        "--allow-domain",
        action="append",
        metavar="HOST",
        help="only open/request these hosts (host, host:port or *.example.com); repeatable",
    )
    g.add_argument("--block-domain", action="append", metavar="HOST", help="never open/request these hosts; repeatable")
    g.add_argument(
        "--private-network",
        choices=["auto", "allow", "block"],
        help="private/loopback addresses: auto (default) = blocked unless the start URL is local",
    )
    add_secret_options(g)
    add_session_options(p)


_CACHE_HELP = "steps replayed with no model call while pages match, the answer judged again; code-equivalent: review it"
_ANY_ORIGIN_HELP = "replay recordings made from another origin (scheme, host, port), e.g. staging's on production"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="webagent", description="A web agent driven by vision-language models.")
    parser.add_argument("--version", action="version", version=f"webagent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser(
        "run",
        help="run one task: open URL and accomplish GOAL",
        description="Run one web task. Exit code 0 = validated success, 1 = not accomplished, "
        "2 = usage or configuration error.",
    )
    run.add_argument("--url", required=True, help="start page")
    run.add_argument("--goal", required=True, help="what to accomplish, in plain language")
    run.add_argument("--output", metavar="DIR", help="run directory to write (default: runs/<time>-<goal>)")
    run.add_argument(
        "--json", action="store_true", help="print the result (as in result.json) as one JSON object on stdout"
    )
    run.add_argument("--cache", metavar="FILE", help=f"replay cache: {_CACHE_HELP}")
    run.add_argument("--cache-any-origin", action="store_true", help=_ANY_ORIGIN_HELP)
    _add_config_options(run)

    test = sub.add_parser(
        "test",
        help="run a suite of website checks (CI smoke tests)",
        description="Run the checks of a suite file (YAML, or JSONL with one check per line: name, url, goal, "
        "optional expect and limits). Each verdict comes from the validator. Writes DIR/results.jsonl, "
        "DIR/junit.xml, DIR/report.html (the whole suite, self-contained), DIR/suite.json and a run directory "
        "per check. Exit code 0 = every check passed, 1 = a check failed, 2 = bad input, 130 = interrupted.",
    )
    test.add_argument("suite", metavar="SUITE", help="suite file (.yaml/.yml, or .jsonl)")
    test.add_argument("--junit", metavar="FILE", help="also write the JUnit XML here")
    test.add_argument("--output", metavar="DIR", help="output directory (default: webagent-test/<suite name>)")
    test.add_argument("--concurrency", type=int, default=4, metavar="N", help="checks at once (default 4)")
    test.add_argument(
        "--cache",
        metavar="FILE",
        help=f"replay cache (JSON, commit it next to the suite): {_CACHE_HELP}; re-plans and updates it when not",
    )
    test.add_argument("--cache-any-origin", action="store_true", help=_ANY_ORIGIN_HELP)
    test.add_argument(
        "--trace",
        choices=["on-failure", "always", "off"],
        default="on-failure",
        help="keep a Playwright trace per check (default on-failure; open with 'playwright show-trace')",
    )
    test.add_argument("--resume", action="store_true", help="continue an interrupted run in the same --output")
    test.add_argument("--suite-budget-calls", type=int, metavar="N", help="hard limit on model calls for the suite")
    test.add_argument("--suite-budget-tokens", type=int, metavar="N", help="hard limit on tokens for the suite")
    test.add_argument("--suite-budget-usd", type=float, metavar="USD", help="hard limit on dollars for the suite")
    _add_ray_options(test, "checks", "SUITE")
    test.add_argument("--json", action="store_true", help="print suite.json on stdout")
    _add_config_options(test)

    batch = sub.add_parser(
        "batch",
        help="run many tasks concurrently, resumably",
        description="Run a task file (JSONL: {id, url, goal}, a benchmark task {id, task: miniwob/NAME, seed} or "
        "WebVoyager's {web_name, id, ques, web}) with up to N "
        "concurrent sessions. Writes DIR/results.jsonl (one line per finished task), a run directory per "
        "attempt under DIR/runs/, and DIR/summary.json. Re-running the same command resumes (and runs again "
        "the tasks an infrastructure error ended). "
        "Exit code 0 = every task finished without an error, 1 = some task ended with stop reason 'error' "
        "(see results.jsonl) or has no result, 2 = bad input, 130 = interrupted (resumable).",
    )
    batch.add_argument("tasks", metavar="TASKS.jsonl", help="task file")
    batch.add_argument("--output", required=True, metavar="DIR", help="batch directory (created; reused to resume)")
    batch.add_argument(
        "--concurrency",
        type=int,
        default=8,
        metavar="N",
        help="sessions at once, at most (default 8): fewer while the browsers do not keep up",
    )
    batch.add_argument("--attempts", type=int, default=1, metavar="K", help="attempts per task, pass@k (default 1)")
    batch.add_argument(
        "--sample-all", action="store_true", help="run all K attempts even after a success (training data)"
    )
    batch.add_argument(
        "--references", metavar="FILE", help="reference answers (WebVoyager reference_answer.json or {id: answer})"
    )
    batch.add_argument(
        "--server-metrics", metavar="URL", help="vLLM /metrics URL: report server tokens/s and prefix-cache hits"
    )
    batch.add_argument(
        "--stall-timeout-s",
        type=float,
        default=300.0,
        metavar="S",
        help="cancel and re-run (once) a session that made no progress (no step, no model reply, no "
        "browser command answered or timed out) for S seconds (default 300; 0 = never)",
    )
    batch.add_argument(
        "--no-retry-infra",
        action="store_true",
        help="on resume, keep the lines of tasks that ended with an infrastructure error (a browser that died "
        "or did not answer in time, a model server that kept failing) instead of running them again",
    )
    batch.add_argument(
        "--workers",
        default="auto",
        metavar="N",
        help="processes of this machine the sessions are spread over, each with its own browsers, driver and "
        "admission (default auto: one per 100 sessions of --concurrency, at most one per CPU; 1: all in this "
        "process)",
    )
    _add_ray_options(batch, "tasks", "TASKS.jsonl")
    batch.add_argument("--json", action="store_true", help="print summary.json on stdout")
    _add_config_options(batch)

    demo = sub.add_parser(
        "demo",
        help="run a bundled task offline: local site + offline model server",
        description="Serve a bundled local site and the offline model server on 127.0.0.1, "
        "then run a real task against them and write its report.",
    )
    demo.add_argument("--task", default="catalog-price", help="bundled task id from tasks/local.jsonl")
    demo.add_argument(
        "--profile",
        choices=list(PROFILES),
        default=DEFAULT_PROFILE,
        help="localizer profile to play",
    )
    demo.add_argument("--output", metavar="DIR", help="run directory (default: runs/demo-<task>)")
    demo.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    demo.add_argument("-q", "--quiet", action="store_true", help="do not print steps")
    demo.add_argument("-v", "--verbose", action="count", default=0, help="log more to stderr")

    mcp = sub.add_parser(
        "mcp",
        help="serve webagent's tools to other agents (Model Context Protocol)",
        description="Serve the MCP tools run_task, open_session, act, check, extract, screenshot and "
        "close_session over stdio (the default: an MCP host starts this command) or streamable HTTP "
        "(--http). The config, allow-lists and secrets are the same as for 'webagent run'; secrets are "
        "named to the client, never shown. Clients open http(s) URLs only, and private or loopback "
        "addresses only when the server allows them (--allow-domain naming the host, or "
        "--private-network allow). Over HTTP, Host and Origin are checked and a bearer token is asked "
        "when one is set (required when bound beyond loopback). Needs the mcp extra: pip install 'webagent[mcp]'. See docs/mcp.md.",
    )
    mcp.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: a free one, printed on stderr)",
    )
    add_token_options(mcp, env=MCP_TOKEN_ENV, scope="with --http: ")
    mcp.add_argument(
        "--max-sessions", type=int, default=4, metavar="N", help="browser sessions kept open at once (default 4)"
    )
    mcp.add_argument(
        "--session-idle-timeout",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="close a kept session unused for this long (default 900; 0: never)",
    )
    mcp.add_argument(
        "--output", default="runs/mcp", metavar="DIR", help="where run directories are written (default runs/mcp)"
    )
    mcp.add_argument(
        "--profile-dir",
        metavar="DIR",
        help="keep named profiles here: open_session(profile=NAME) loads NAME's signed-in state and saves it "
        "back (0600) after each act and at close",
    )
    _add_config_options(mcp)

    fake = sub.add_parser(
        "fake-server",
        help="serve the offline OpenAI-compatible model server",
        description="Play the three model roles from a script on 127.0.0.1 (for tests and pipelines).",
    )
    fake.add_argument("--script", required=True, metavar="FILE", help="JSON script (see docs/offline-server.md)")
    fake.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    fake.add_argument(
        "--family",
        choices=list(FAMILIES),
        help="image-token family of the models served, for the simulated prefix cache (default: told by each "
        "request's model name)",
    )

    from ..training.cli import add_export_parser

    add_export_parser(sub)

    from ..env.cli import add_env_parser

    add_env_parser(sub, _add_config_options)

    _add_auth_parser(sub, _add_config_options)

    from ..shell.cli import add_shell_parsers

    add_shell_parsers(sub, _add_config_options)

    sites = sub.add_parser(
        "sites",
        help="serve the bundled local task sites on 127.0.0.1",
        description="Serve the local websites under tasks/sites for tests and demos.",
    )
    sites.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    return parser


def _add_auth_parser(
    sub: Any,
    add_config_options: Callable[[argparse.ArgumentParser], None],
) -> None:
    auth = sub.add_parser(
        "auth",
        help="sign in to a site once and save the browser state for later runs",
        description="Manage signed-in browser states.",
    )
    commands = auth.add_subparsers(dest="auth_command", metavar="ACTION", parser_class=type(auth))
    save = commands.add_parser(
        "save",
        help="sign in at URL (with --secret values) and save the browser state",
        description="Run the sign-in GOAL at URL; when it succeeds, write the browser's state (cookies, local "
        "storage, IndexedDB) to --output, readable by its owner only (0600). Use it with --storage-state FILE or "
        "[browser] storage_state. Exit code 0 = signed in and saved, 1 = not signed in (nothing written), "
        "2 = usage or configuration error.",
    )
    save.add_argument("url", metavar="URL", help="the sign-in page (or a page that leads to it)")
    save.add_argument("--goal", required=True, help='what signing in takes, e.g. "sign in as ada with {{PASSWORD}}"')
    save.add_argument("--output", required=True, metavar="FILE", help="where to write the state (JSON, 0600)")
    save.add_argument(
        "--run-dir",
        metavar="DIR",
        help="the sign-in's run directory (default: runs/<time>-auth); never holds the state",
    )
    add_config_options(save)


#: Config key -> the flag that sets it (besides the per-role ones), for config_from_args and errors.
_FLAGS: dict[str, str] = {
    "localizer.profile": "--localizer-profile",
    "policy.family": "--policy-family",
    "validator.family": "--validator-family",
    "agent.max_steps": "--max-steps",
    "agent.max_attempts": "--max-attempts",
    "agent.max_time_s": "--max-time",
    "agent.screenshots_in_context": "--screenshots",
    "agent.grounding": "--grounding",
    "agent.max_actions_per_turn": "--max-actions-per-turn",
    "policy.output": "--policy-output",
    "agent.budget_calls": "--budget-calls",
    "agent.budget_tokens": "--budget-tokens",
    "agent.budget_usd": "--budget-usd",
    "browser.headless": "--headed",
    "browser.executable_path": "--executable-path",
    "browser.viewport": "--viewport",
    "browser.allowed_domains": "--allow-domain",
    "browser.blocked_domains": "--block-domain",
    "browser.private_network": "--private-network",
    "browser.ws_endpoint": "--ws-endpoint",
    "browser.cdp_endpoint": "--cdp-endpoint",
    "browser.downloads": "--downloads",
    "browser.max_downloads": "--max-downloads",
    "browser.max_download_mb": "--max-download-mb",
}
_FLAGS |= {f"{role}.{field}": f"--{role}-{field.replace('_', '-')}" for role in ROLES for field, _, _ in _ROLE_FIELDS}


def cli_option(key: str) -> str | None:
    """The flag that sets a config key (``"policy.base_url"`` -> ``--policy-base-url``): how the
    CLI words a ``ConfigError`` about it."""
    if key.startswith(("secrets.", "secret_hosts.")):
        return SECRET_FLAGS[key.partition(".")[0]]
    return _FLAGS.get(key) or SESSION_FLAGS.get(".".join(key.split(".")[:2]))


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    overrides: dict[str, Any] = session_overrides(args)
    if getattr(args, "cache_any_origin", False):  # (run and test only)
        overrides["agent.replay_any_origin"] = True
    for role in ROLES:
        for field, _, _ in _ROLE_FIELDS:
            value = getattr(args, f"{role}_{field}", None)
            shared = getattr(args, field, None) if field in ("base_url", "model", "api_key") else None
            overrides[f"{role}.{field}"] = value if value is not None else shared
    for key, flag in _FLAGS.items():
        if key not in overrides:
            overrides[key] = getattr(args, flag.removeprefix("--").replace("-", "_"))
    overrides["browser.headless"] = False if args.headed else None
    overrides |= secret_overrides(args)
    return load_config(args.config, overrides=overrides, option=cli_option)
