"""What each request does in the background process: life (start, list, close), looking (screenshot,
text, snap, find, downloads, tab list), acting (``acting.act``) and delegation to webagent's roles
(``act``, ``check``, ``extract`` through the session's ``Pilot``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from .. import actions as acts
from ..actions import Action
from ..errors import BrowserCrashError
from .acting import act, locate
from .delegation import delegate_act, delegate_check, delegate_extract
from .pageread import read_page
from .protocol import EXIT_BAD, EXIT_NO_BROWSER, EXIT_OK, Reply, Request, ShellError
from .refs import Control
from .sessions import SessionStore, ShellSession
from .snapdiff import diff_rows

__all__ = ["Commands"]

_ACTION: TypeAdapter[Action] = TypeAdapter(Action)
_REF_MARK = "\u0001"


def _str(args: dict[str, Any], key: str, default: str | None = None) -> str | None:
    value = args.get(key, default)
    if value is not None and not isinstance(value, str):
        raise ShellError(EXIT_BAD, f"{key} must be text")
    return value


def _need(args: dict[str, Any], key: str) -> str:
    value = _str(args, key)
    if not value:
        raise ShellError(EXIT_BAD, f"{key} is missing")
    return value


def _int(args: dict[str, Any], key: str, default: int) -> int:
    value = args.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ShellError(EXIT_BAD, f"{key} must be a whole number")
    return value


class Commands:
    """The commands of one background process over its sessions."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._locks: dict[str, asyncio.Lock] = {}
        self.table: dict[str, Callable[[ShellSession, dict[str, Any]], Awaitable[Reply]]] = {
            "screenshot": self.screenshot,
            "text": self.text,
            "snap": self.snap,
            "find": self.find,
            "downloads": self.downloads,
            "click": self.pointer(lambda e: acts.ClickElement(element=e)),
            "hover": self.pointer(lambda e: acts.HoverElement(element=e)),
            "double-click": self.pointer(lambda e: acts.DoubleClickElement(element=e)),
            "right-click": self.pointer(lambda e: acts.RightClickElement(element=e)),
            "drag": self.drag,
            "type": self.type,
            "secret": self.secret,
            "select": self.select,
            "key": self.key,
            "scroll": self.scroll,
            "upload": self.upload,
            "goto": self.goto,
            "back": lambda s, a: act(s, acts.GoBack(), None),
            "refresh": lambda s, a: act(s, acts.Refresh(), None),
            "tab": self.tab,
            "wait": self.wait,
            "do": self.do,
            "act": delegate_act,
            "check": delegate_check,
            "extract": delegate_extract,
        }

    async def handle(self, request: Request) -> Reply:
        args = dict(request.args)
        match request.command:
            case "start":
                return await self.start(request, args)
            case "list":
                return await self.list_sessions()
            case "close":
                if args.get("all"):
                    names = await self.store.close_all()
                    return Reply(text=f"closed {len(names)} session(s)", data={"closed": list(names)})
                await self.store.close(request.session)
                return Reply(text=f"closed {request.session}", data={"closed": [request.session]})
        handler = self.table.get(request.command)
        if handler is None:
            raise ShellError(EXIT_BAD, f"unknown command {request.command[:40]!r}")
        session = self.store.get(request.session)
        lock = self._locks.setdefault(request.session, asyncio.Lock())
        async with lock:  # one command at a time on a session
            try:
                session.check_alive()
                reply = await handler(session, args)
            except BrowserCrashError:
                session.gone = True
                raise
            except ShellError as exc:
                session.gone = session.gone or exc.code == EXIT_NO_BROWSER
                raise
            session.gone = reply.code == EXIT_NO_BROWSER
            return reply

    # -- life -----------------------------------------------------------------------------------
    async def start(self, request: Request, args: dict[str, Any]) -> Reply:
        profile, state = _str(args, "profile"), _str(args, "storage_state")
        s = await self.store.open(
            request.session,
            request.config or {},
            url=_str(args, "url"),
            profile=Path(profile) if profile else None,
            storage_state=Path(state) if state else None,
        )
        url, title = s.driver.url, await s.driver.title()
        return Reply(
            text=f"started {s.name} at {url} ({title!r})",
            data={"session": s.name, "url": url, "title": title, "folder": str(s.folder)},
        )

    async def list_sessions(self) -> Reply:
        rows: list[dict[str, Any]] = []
        for s in self.store.sessions.values():
            alive = not s.session.browser_crashed and s.page_open
            title = await s.driver.title() if alive else ""
            rows.append(
                {
                    "name": s.name,
                    "url": s.driver.url,
                    "title": title,
                    "alive": alive,
                    "profile": str(s.profile.path) if s.profile else None,
                }
            )
        text = "\n".join(
            f"{r['name']}\t{r['url']}\t{r['title']}" + ("" if r["alive"] else "\t(browser gone)") for r in rows
        )
        return Reply(text=text, data={"sessions": rows})

    # -- looking --------------------------------------------------------------------------------
    async def _read(self, s: ShellSession, with_text: bool) -> tuple[list[Control], str]:
        read = await read_page(s, with_text)  # frames of other origins too
        s.refs.renumber(read.controls, [(o.frame is not None, o.local) for o in read.owners])
        return read.controls, read.text

    def _control_line(self, s: ShellSession, i: int, c: Control) -> str:
        value = f" = {c.value!r}" if c.value not in (None, "") else ""
        return s.secrets.redact(f'@e{i} {c.role} "{c.name}"{value}')

    async def screenshot(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        s.shots += 1
        target = _str(args, "path")
        path = Path(target) if target else s.folder / f"shot-{s.shots}.png"  # absolute: the client made it so
        png = await s.pilot.screenshot()
        await asyncio.to_thread(path.write_bytes, png)
        tabs = await s.driver.tabs()
        current = next((t.index for t in tabs if t.current), 0)
        scroll = await s.driver.evaluate("() => [Math.round(scrollX), Math.round(scrollY)]")
        sx, sy = scroll if isinstance(scroll, list) else (0, 0)
        width, height = s.session.viewport
        data = {
            "path": str(path),
            "url": s.driver.url,
            "title": await s.driver.title(),
            "tab": current,
            "tabs": max(1, len(tabs)),
            "viewport": [width, height],
            "scroll": [sx, sy],
        }
        text = f"{path}\n{data['url']} ({data['title']!r}) tab {current + 1}/{max(1, len(tabs))} viewport {width}x{height} scroll {sx},{sy}"
        return Reply(text=s.secrets.redact(text), data=data)

    async def text(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        controls, raw = await self._read(s, True)
        for i, c in enumerate(controls, start=1):
            raw = raw.replace(f"{_REF_MARK}{i - 1}{_REF_MARK}", f"[{self._control_line(s, i, c)}]")
        lines = [" ".join(line.split()) for line in raw.splitlines()]
        lines = [line for line in lines if line]
        start, limit = _int(args, "from", 1), _int(args, "limit", 200)
        if start < 1 or limit < 1:
            raise ShellError(EXIT_BAD, "--from and --limit must be 1 or more")
        shown = lines[start - 1 : start - 1 + limit]
        more = start - 1 + limit < len(lines)
        text = "\n".join(shown) + (f"\n… {len(lines)} lines in all: --from {start + limit} for more" if more else "")
        data = {"url": s.driver.url, "lines": len(lines), "from": start, "text": s.secrets.redact("\n".join(shown))}
        return Reply(text=s.secrets.redact(text), data=data)

    async def snap(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        controls, _ = await self._read(s, False)
        lines = [self._control_line(s, i, c) for i, c in enumerate(controls, start=1)]
        rows = [
            {
                "ref": f"@e{i}",
                "role": c.role,
                "name": s.secrets.redact(c.name),
                "value": s.secrets.redact(c.value) if c.value else c.value,
                "x": c.x,
                "y": c.y,
            }
            for i, c in enumerate(controls, start=1)
        ]
        before, s.last_snap = s.last_snap, rows
        if args.get("diff"):
            changes, text = diff_rows(before, rows)
            return Reply(text=text, data={"url": s.driver.url, **changes})
        return Reply(text="\n".join(lines), data={"url": s.driver.url, "controls": rows})

    async def find(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        words = _need(args, "query").lower().split()
        controls, _ = await self._read(s, False)
        matches = [
            {"ref": f"@e{i}", "role": c.role, "name": s.secrets.redact(c.name), "x": c.x, "y": c.y}
            for i, c in enumerate(controls, start=1)
            if all(w in f"{c.role} {c.name}".lower() for w in words)
        ]
        text = "\n".join(f'{m["ref"]} {m["role"]} "{m["name"]}" at {m["x"]:.0f},{m["y"]:.0f}' for m in matches)
        return Reply(code=EXIT_OK if matches else 1, text=text or "no match", data={"matches": matches})

    async def downloads(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        files = [d.model_dump(mode="json") for d in s.session.downloads]
        text = "\n".join(f"{d['path']}\t{d['bytes']} bytes\t{d['url']}" for d in files)
        return Reply(text=text, data={"downloads": files})

    # -- acting ---------------------------------------------------------------------------------
    def pointer(self, make: Callable[[str], Action]) -> Callable[[ShellSession, dict[str, Any]], Awaitable[Reply]]:
        async def run(s: ShellSession, args: dict[str, Any]) -> Reply:
            point = await self._point(s, args)
            return await act(s, make(_str(args, "ref") or _at(args)), point)

        return run

    async def _point(self, s: ShellSession, args: dict[str, Any], ref: str = "ref", at: str = "at") -> Any:
        point = await locate(s, _str(args, ref), _xy(args.get(at)))
        if point is None:
            raise ShellError(EXIT_BAD, "give a ref (@e12) or --at x,y")
        return point

    async def drag(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        point = await self._point(s, args)
        target = await self._point(s, args, "to_ref", "to_at")
        action = acts.DragElement(
            element=_str(args, "ref") or _at(args), target=_str(args, "to_ref") or "the point given"
        )
        return await act(s, action, point, target=target)

    async def type(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        text = _str(args, "text", "") or ""
        if not text and not args.get("clear"):
            raise ShellError(EXIT_BAD, "nothing to type: give the text, or --clear to empty the field")
        if s.secrets.placeholders(text):
            raise ShellError(EXIT_BAD, "type does not take {{NAME}}: type a secret with 'secret REF NAME'")
        point = await self._point(s, args)
        action = acts.WriteElement(
            element=_str(args, "ref") or _at(args), content=text, press_enter=bool(args.get("submit"))
        )
        return await act(s, action, point, typed=True)

    async def secret(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        name = _need(args, "name")
        if name not in s.secrets.names:
            raise ShellError(
                EXIT_BAD,
                f"session {s.name!r} has no secret {name!r}: set WEBAGENT_SECRET_{name} (or [secrets]) before start",
            )
        point = await self._point(s, args)
        action = acts.WriteElement(
            element=_str(args, "ref") or _at(args), content=f"{{{{{name}}}}}", press_enter=bool(args.get("submit"))
        )
        return await act(s, action, point, typed=True)

    async def select(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        point = await self._point(s, args)
        return await act(
            s,
            acts.SelectOption(element=_str(args, "ref") or _at(args), option=_need(args, "option")),
            point,
            typed=True,
        )

    async def key(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        return await act(s, acts.PressKey(key=_need(args, "key")), None)

    async def scroll(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        direction = _need(args, "direction")
        if direction not in ("up", "down", "left", "right"):
            raise ShellError(EXIT_BAD, f"scroll direction {direction[:20]!r}: up, down, left or right")
        point = await locate(s, _str(args, "ref"), _xy(args.get("at")))
        element = _str(args, "ref") or (_at(args) if point else None)
        return await act(s, acts.Scroll.model_validate({"direction": direction, "element": element}), point)

    async def upload(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        point = await self._point(s, args)
        return await act(s, acts.UploadFile(element=_str(args, "ref") or _at(args), file=_need(args, "file")), point)

    async def goto(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        return await act(s, acts.Goto(url=_need(args, "url")), None)

    async def tab(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        which, close = _str(args, "which", "list") or "list", bool(args.get("close"))
        if which == "list":
            tabs = await s.driver.tabs()
            text = "\n".join(f"{t.index}{'*' if t.current else ' '} {t.url}\t{t.title}" for t in tabs)
            return Reply(text=text, data={"tabs": [t.model_dump(mode="json") for t in tabs]})
        if not which.isdigit():
            raise ShellError(EXIT_BAD, f"tab {which[:20]!r}: give 'list', an index, or 'close INDEX'")
        action: Action = acts.CloseTab(index=int(which)) if close else acts.SwitchTab(index=int(which))
        return await act(s, action, None)

    async def wait(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        text, url, idle = _str(args, "text"), _str(args, "url"), bool(args.get("idle"))
        timeout = float(args.get("timeout") or 10)
        if not (text or url or idle):
            raise ShellError(EXIT_BAD, "wait for what: --text TEXT, --url PART or --idle")
        deadline = time.monotonic() + min(max(timeout, 0.1), 120)
        while True:
            page = await s.driver.page_text() if text else ""
            if (not text or text in page) and (not url or url in s.driver.url):
                if idle:
                    await s.session.settle()
                return Reply(text=f"ready at {s.driver.url}", data={"url": s.driver.url})
            if time.monotonic() >= deadline:
                return Reply(
                    code=4, text=f"waited {timeout:g}s: not there yet (at {s.driver.url})", data={"url": s.driver.url}
                )
            await asyncio.sleep(0.2)

    async def do(self, s: ShellSession, args: dict[str, Any]) -> Reply:
        raw = args.get("action")
        try:
            action = _ACTION.validate_json(raw) if isinstance(raw, str) else _ACTION.validate_python(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the action"
            raise ShellError(EXIT_BAD, f"the action JSON is not valid: {where}: {first['msg']}") from None
        if action.action in ("answer", "ask_user"):
            raise ShellError(EXIT_BAD, f"{action.action} is not a browser action: use act, check or extract")
        point = await locate(s, _str(args, "ref"), _xy(args.get("at")))
        target = await locate(s, _str(args, "to_ref"), _xy(args.get("to_at")))
        return await act(
            s, action, point, target=target, typed=isinstance(action, acts.WriteElement | acts.SelectOption)
        )


def _xy(value: Any) -> list[Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        parts = value.replace(" ", "").split(",")
        if len(parts) != 2:
            raise ShellError(EXIT_BAD, f"{value[:40]!r} is not a point: give x,y in CSS pixels")
        return list(parts)
    if isinstance(value, list):
        return value
    raise ShellError(EXIT_BAD, "a point is x,y in CSS pixels")


def _at(args: dict[str, Any]) -> str:
    return f"the point {args.get('at')}"
