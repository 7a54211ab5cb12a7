"""``webagent env serve`` in a child process, for the tests that drive it as its users do."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from webagent.env.cli import READY_PREFIX, TOKEN_ENV

VIEWPORT = (500, 320)
CONFIG = f"[browser]\nviewport = {{ width = {VIEWPORT[0]}, height = {VIEWPORT[1]} }}\n"
TOKEN = "env-t0ken-for-the-tests-0123456789"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Served:
    """A running server: its process, base URL, and what it printed on stderr after it was ready."""

    proc: asyncio.subprocess.Process
    url: str
    log: list[str] = field(default_factory=list)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``webagent`` child: no WEBAGENT_ settings but ``extra``, this checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WEBAGENT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return {**env, **(extra or {})}


@contextlib.asynccontextmanager
async def serve(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> AsyncIterator[Served]:
    """``python -m webagent env serve --port 0``: the process and its base URL once it listens."""
    config = tmp_path / "webagent.toml"
    config.write_text(CONFIG)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webagent", "env", "serve", "--port", "0", "--config", str(config), *args,
        stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, env=child_env(env),
    )  # fmt: skip
    served: Served | None = None
    drain: asyncio.Task[None] | None = None
    try:
        assert proc.stderr is not None
        async with asyncio.timeout(180):  # a loaded machine: imports take a while
            line = (await proc.stderr.readline()).decode()
            while not line.startswith(READY_PREFIX):
                assert line, "the server exited before it was ready"
                line = (await proc.stderr.readline()).decode()
        served = Served(proc, line.removeprefix(READY_PREFIX).strip().replace("0.0.0.0", "127.0.0.1"))

        async def read_rest() -> None:  # a full pipe would block the server
            assert proc.stderr is not None
            while chunk := await proc.stderr.readline():
                served.log.append(chunk.decode())

        drain = asyncio.create_task(read_rest())
        yield served
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                async with asyncio.timeout(30):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if drain is not None:
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(drain, 10)


async def status(url: str, token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient() as http:
        return (await http.get(f"{url}/webagent/status", timeout=30, headers=headers)).json()  # type: ignore[no-any-return]


__all__ = ["CONFIG", "TOKEN", "TOKEN_ENV", "VIEWPORT", "Served", "child_env", "serve", "status"]
