"""``webagent session COMMAND`` and ``webagent skill``: the parsers (added to the CLI's by
``add_shell_parsers``) and what each command sends and prints.

Text goes to stdout (a receipt, a read, a verdict), an error to stderr as one line; ``--json``
prints one object on stdout instead: ``code`` (the exit code), ``ok``, the command's data, and
``error`` when it failed. Every printed string goes through ``terminal_text``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from pydantic import JsonValue

from ..config import AgentConfig
from ..errors import WebAgentError
from ..inputs import terminal_json, terminal_text
from .client import call
from .protocol import EXIT_BAD, EXIT_OK, Reply, Request, ShellError

__all__ = ["SESSION", "SKILL", "add_shell_parsers", "quick_session", "run_session", "run_skill", "skill_text"]

_POINTER = ("click", "hover", "double-click", "right-click")


def skill_text() -> str:
    return resources.files("webagent.shell").joinpath("skill/SKILL.md").read_text(encoding="utf-8")


SESSION_HELP = "a browser that outlives each command, for coding agents in a shell (docs/shell.md)"
SKILL_HELP = "print the coding-agent skill file (SKILL.md), or install it"


def add_shell_parsers(sub: Any, add_config_options: Callable[[argparse.ArgumentParser], None]) -> None:
    """``session`` (its commands; ``start`` with the configuration flags of ``run``) and ``skill``."""
    add_session_arguments(sub.add_parser("session", help=SESSION_HELP), add_config_options)
    add_skill_arguments(sub.add_parser("skill", help=SKILL_HELP))


def add_session_arguments(
    session: argparse.ArgumentParser, add_config_options: Callable[[argparse.ArgumentParser], None]
) -> None:
    """``session``'s description, options and commands (``start`` with the configuration flags of ``run``)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--session", default=argparse.SUPPRESS, help="the session (default $WEBAGENT_SESSION or 'default')"
    )
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object")
    session.description = (
        "Commands over a browser kept by a per-user background process (docs/shell.md). Exit codes: 0 done, "
        "1 goal not accomplished or check does not hold, 2 bad input or page error, 3 nothing changed, 4 stale ref, "
        "covered target or frozen page, 5 bot challenge, 6 no browser."
    )
    session.add_argument(
        "--session",
        default=os.environ.get("WEBAGENT_SESSION", "default"),
        help="the session (default $WEBAGENT_SESSION or 'default')",
    )
    session.add_argument("--json", action="store_true", help="print one JSON object")
    commands = session.add_subparsers(
        dest="session_command", metavar="COMMAND", parser_class=type(session), required=True
    )

    def add(name: str, text: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=text, description=text, parents=[common])

    start = commands.add_parser(
        "start",
        help="open a session",
        description="Open a session; later commands use its configuration.",
        parents=[common],
        conflict_handler="resolve",
    )
    add_config_options(start)
    start.add_argument("--url", help="the page to open (default: a blank page)")
    start.add_argument(
        "--profile",
        metavar="DIR",
        help="a persistent profile folder (0700) whose signed-in state is kept; locked while in use",
    )
    start.add_argument("--storage-state", metavar="FILE", help="start signed in from a Playwright storage state")
    add("list", "the open sessions")
    close = add("close", "close the session (or --all)")
    close.add_argument("--all", action="store_true", help="close every session")
    shot = add("screenshot", "save a PNG of the viewport: its path, URL, title, tab, viewport, scroll")
    shot.add_argument("--path", metavar="FILE", help="where to save it (default: the session's folder)")
    text = add("text", "the page as text, controls inline with refs")
    text.add_argument("--from", dest="from_line", type=int, default=1, metavar="N", help="first line (default 1)")
    text.add_argument("--limit", type=int, default=200, metavar="N", help="lines at most (default 200)")
    snap = add("snap", "the controls only, one per line, with refs")
    snap.add_argument(
        "--diff",
        action="store_true",
        help="only the controls added (+), removed (-) or changed (~) since the last snap",
    )
    find = add("find", "controls whose role and name hold every word of QUERY: refs and centres")
    find.add_argument("query")
    for name in _POINTER:
        add(name, f"{name} a ref (@e12) or a point (x,y)").add_argument("target", metavar="TARGET")
    drag = add("drag", "drag from TARGET to TO")
    drag.add_argument("target", metavar="TARGET")
    drag.add_argument("to", metavar="TO")
    typing = add("type", "type TEXT into the field at TARGET (its text is replaced)")
    typing.add_argument("target", metavar="TARGET")
    typing.add_argument("text", nargs="?", default="")
    typing.add_argument("--submit", action="store_true", help="press Enter after typing")
    typing.add_argument("--clear", action="store_true", help="empty the field (with no TEXT)")
    secret = add("secret", "type the secret NAME of the session's config into TARGET, never shown")
    secret.add_argument("target", metavar="TARGET")
    secret.add_argument("name", metavar="NAME")
    secret.add_argument("--submit", action="store_true", help="press Enter after typing")
    select = add("select", "choose OPTION (its visible label) in the select at TARGET")
    select.add_argument("target", metavar="TARGET")
    select.add_argument("option", metavar="OPTION")
    add("key", "press KEY (Enter, Escape, Control+A, ...)").add_argument("key", metavar="KEY")
    scroll = add("scroll", "scroll the page, or the panel at TARGET: [TARGET] up|down|left|right")
    scroll.add_argument("words", nargs="+", metavar="[TARGET] DIRECTION")
    upload = add("upload", "give FILE (a name the config's upload_dir or upload_files allows) to the input at TARGET")
    upload.add_argument("target", metavar="TARGET")
    upload.add_argument("file", metavar="FILE")
    add("goto", "open URL").add_argument("url", metavar="URL")
    add("back", "go back")
    add("refresh", "reload the page")
    tab = add("tab", "tab list | tab N | tab close N")
    tab.add_argument("words", nargs="*", metavar="list|N|close N")
    wait = add("wait", "wait until the page shows --text, the URL holds --url, or it is --idle")
    wait.add_argument("--text")
    wait.add_argument("--url")
    wait.add_argument("--idle", action="store_true")
    wait.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="at most (default 10)")
    add("downloads", "the files the session's pages downloaded")
    do = add("do", "carry out one action given as webagent's action JSON, at TARGET")
    do.add_argument("action", metavar="JSON")
    do.add_argument("target", nargs="?", metavar="TARGET")
    do.add_argument("--to", metavar="TARGET", help="a drag's target")
    act = add("act", "hand GOAL to webagent's policy, localizer and validator from the page as it stands")
    act.add_argument("goal")
    act.add_argument("--max-steps", type=int, metavar="N")
    check = add("check", "the validator's verdict on ASSERTION about the page now (exit 1: it does not hold)")
    check.add_argument("assertion")
    extract = add("extract", "read QUESTION off the page: validated JSON (with --schema) or text")
    extract.add_argument("question")
    extract.add_argument("--schema", metavar="FILE", help="a JSON schema file the answer must follow")


def add_skill_arguments(skill: argparse.ArgumentParser) -> None:
    """``skill``'s actions: print (none) or ``install``."""
    skill_commands = skill.add_subparsers(dest="skill_command", metavar="ACTION")
    install = skill_commands.add_parser("install", help="copy SKILL.md where coding agents look for skills")
    install.add_argument(
        "--dir", metavar="DIR", help="the skills folder (default ~/.claude/skills): DIR/webagent/SKILL.md"
    )


def _target(value: str | None, ref_key: str = "ref", at_key: str = "at") -> dict[str, JsonValue]:
    if value is None:
        return {}
    if value.startswith("@") or (value[:1] == "e" and value[1:].isdigit()):
        return {ref_key: value}
    return {at_key: value}


def _args(args: argparse.Namespace) -> dict[str, JsonValue]:
    command: str = args.session_command
    a: dict[str, JsonValue] = {}
    if command in (*_POINTER, "type", "secret", "select", "upload", "drag", "do"):
        a.update(_target(getattr(args, "target", None)))
    match command:
        case "start":
            a.update(url=args.url, profile=_absolute(args.profile), storage_state=_absolute(args.storage_state))
        case "close":
            a["all"] = args.all
        case "screenshot":
            a["path"] = _absolute(args.path)
        case "text":
            a.update({"from": args.from_line, "limit": args.limit})
        case "snap":
            a["diff"] = args.diff
        case "find":
            a["query"] = args.query
        case "drag":
            a.update(_target(args.to, "to_ref", "to_at"))
        case "type":
            a.update(text=args.text, submit=args.submit, clear=args.clear)
        case "secret":
            a.update(name=args.name, submit=args.submit)
        case "select":
            a["option"] = args.option
        case "key":
            a["key"] = args.key
        case "scroll":
            if len(args.words) > 2:
                raise ShellError(EXIT_BAD, "scroll takes [TARGET] DIRECTION")
            a["direction"] = args.words[-1]
            a.update(_target(args.words[0] if len(args.words) == 2 else None))
        case "upload":
            a["file"] = args.file
        case "goto":
            a["url"] = args.url
        case "tab":
            words = args.words or ["list"]
            if words[0] == "close" and len(words) == 2:
                a.update(which=words[1], close=True)
            elif len(words) == 1:
                a["which"] = words[0]
            else:
                raise ShellError(EXIT_BAD, "tab takes list, N, or close N")
        case "wait":
            a.update(text=args.text, url=args.url, idle=args.idle, timeout=args.timeout)
        case "do":
            a["action"] = args.action
            a.update(_target(args.to, "to_ref", "to_at"))
        case "act":
            a.update(goal=args.goal, max_steps=args.max_steps)
        case "check":
            a["assertion"] = args.assertion
        case "extract":
            a["question"] = args.question
            if args.schema:
                a["schema"] = _schema_file(args.schema)
    return {k: v for k, v in a.items() if v is not None}


def _absolute(name: str | None) -> str | None:
    """A path as the background process must get it (its working directory is not the caller's)."""
    return os.path.abspath(os.path.expanduser(name)) if name else None


def _schema_file(name: str) -> dict[str, JsonValue]:
    try:
        value = json.loads(Path(name).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ShellError(EXIT_BAD, f"cannot read the schema file {name}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ShellError(EXIT_BAD, f"the schema file {name} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ShellError(EXIT_BAD, f"the schema file {name} does not hold a JSON object")
    return value


def _print(reply: Reply, as_json: bool) -> int:
    failed = reply.code not in (0, 1, 3, 5) or "error" in reply.data  # 3 and 5 are receipts
    if as_json:
        body: dict[str, Any] = {"code": reply.code, "ok": reply.code == EXIT_OK, **reply.data}
        if failed:
            body["error"] = reply.text
        print(terminal_json(json.dumps(body, ensure_ascii=False)))
    elif failed:
        print(terminal_text(f"webagent: {' '.join(reply.text.split())}"), file=sys.stderr)
    elif reply.text:
        print(terminal_text(reply.text))
    return reply.code


def run_session(args: argparse.Namespace, config_from_args: Callable[[argparse.Namespace], AgentConfig]) -> int:
    as_json = bool(getattr(args, "json", False))
    try:
        config = None
        if args.session_command == "start":
            from ..batch.worker import config_payload

            config = config_payload(config_from_args(args))
        request = Request(command=args.session_command, session=args.session, args=_args(args), config=config)
        reply = call(request)
    except ShellError as exc:
        reply = Reply(code=exc.code, text=str(exc), data={"error": str(exc)})
    except WebAgentError as exc:
        reply = Reply(code=EXIT_BAD, text=str(exc), data={"error": str(exc)})
    except ValueError as exc:
        reply = Reply(code=EXIT_BAD, text=str(exc).splitlines()[0], data={"error": str(exc).splitlines()[0]})
    return _print(reply, as_json)


class _OneLine(argparse.ArgumentParser):
    """Usage errors in one line, exit 2 (as the CLI's own parser has them)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD, f"webagent: error: {message} (see '{self.prog} --help')\n")


def quick_session(argv: list[str]) -> int | None:
    """``webagent session ...`` without the rest of the CLI's parser (whose building imports every
    feature): every command but ``start``, which takes the configuration flags (None: the full path)."""
    if "start" in argv or "-h" in argv or "--help" in argv:
        return None
    parser = _OneLine(prog="webagent")
    add_shell_parsers(parser.add_subparsers(dest="command", parser_class=_OneLine), lambda p: None)
    args = parser.parse_args(["session", *argv])

    def no_config(_: argparse.Namespace) -> AgentConfig:  # pragma: no cover - start takes the full path
        raise ShellError(EXIT_BAD, "start needs the configuration flags")

    return run_session(args, no_config)


def run_skill(args: argparse.Namespace) -> int:
    if getattr(args, "skill_command", None) != "install":
        sys.stdout.write(skill_text())
        return EXIT_OK
    folder = Path(args.dir).expanduser() if args.dir else Path.home() / ".claude" / "skills"
    target = folder / "webagent" / "SKILL.md"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with resources.as_file(resources.files("webagent.shell").joinpath("skill/SKILL.md")) as source:
            shutil.copyfile(source, target)
    except OSError as exc:
        print(terminal_text(f"webagent: cannot install the skill in {folder}: {exc.strerror or exc}"), file=sys.stderr)
        return EXIT_BAD
    print(terminal_text(str(target)))
    return EXIT_OK


class SessionCommand:
    """``webagent session``: commands over a browser kept by the per-user background process."""

    name = "session"
    help = SESSION_HELP

    def add_arguments(
        self, parser: argparse.ArgumentParser, config_options: Callable[[argparse.ArgumentParser], None]
    ) -> None:
        add_session_arguments(parser, config_options)

    def run(self, args: argparse.Namespace, config: Callable[[], AgentConfig]) -> int:
        return run_session(args, lambda _: config())


class SkillCommand:
    """``webagent skill``: the coding-agent skill file."""

    name = "skill"
    help = SKILL_HELP

    def add_arguments(
        self, parser: argparse.ArgumentParser, config_options: Callable[[argparse.ArgumentParser], None]
    ) -> None:
        add_skill_arguments(parser)

    def run(self, args: argparse.Namespace, config: Callable[[], AgentConfig]) -> int:
        return run_skill(args)


SESSION, SKILL = SessionCommand(), SkillCommand()
