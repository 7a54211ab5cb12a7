"""Bad input to ``webagent env serve``, route by route: each a 4xx in openenv-core's shapes (over HTTP
FastAPI's ``{"detail": ...}``, over ``/ws`` its error message), never a 500 and never a traceback in
the server's log. Client calls through openenv-core's own client; malformed bodies and messages raw.
And the default tasks an empty reset draws (``--tasks``), seeded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from openenv.core.generic_client import GenericEnvClient
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

from webagent.env.openenv import WebAction, WebagentClient

from .server import Served, child_env, serve

pytestmark = pytest.mark.browser

HUGE = "x" * 1_100_000
MiB = 1 << 20


def one_line(detail: object) -> str:
    """A 4xx's detail: one short line."""
    assert isinstance(detail, str) and "\n" not in detail and 0 < len(detail) < 400, detail
    return detail


async def http(served: Served, method: str, path: str, body: Any = None, raw: bytes | None = None) -> httpx.Response:
    async with httpx.AsyncClient(timeout=60) as client:
        headers = {"content-type": "application/json"}
        content = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        return await client.request(method, served.url + path, content=content, headers=headers)


async def test_every_route_answers_bad_input_with_a_4xx(tmp_path: Path) -> None:
    async with serve(tmp_path, "--max-steps", "1") as served:
        # /health, /schema, /metadata, /webagent/status: GET only; junk in the query is ignored.
        for path in ("/health", "/schema", "/metadata", "/state", "/webagent/status"):
            assert (await http(served, "GET", f"{path}?x={'y' * 4000}&task=[")).status_code == 200, path
            assert (await http(served, "POST", path, {"x": 1})).status_code == 405, path
            assert (await http(served, "DELETE", path)).status_code == 405, path
        assert (await http(served, "GET", "/nope")).status_code == 404

        # /reset: what the client got wrong, one line each.
        reset = await http(served, "POST", "/reset", {})
        assert reset.status_code == 400 and "reset needs a task" in one_line(reset.json()["detail"])
        for body, words in (
            ({"task": "miniwob/nope"}, "no MiniWoB++ task named 'nope'"),
            ({"task": "nope/x"}, "no task set named 'nope'"),
            ({"task": "click-test"}, "'<set>/<task>'"),
            ({"task": "miniwob/" + HUGE[:5000]}, "no MiniWoB++ task named"),
            ({"task": 5}, "not int"),
            ({"task": ["miniwob/click-test"]}, "not list"),
            ({"task": {"task": 7}}, "names a benchmark task"),
            ({"task": {"url": "https://example.com"}}, "needs goal"),
            ({"task": {"url": "https://example.com", "goal": "g", "bowser": {}}}, "unknown: bowser"),
            (
                {"task": {"url": "https://example.com", "goal": "g", "browser": {"nope": 1}}},
                "browser.nope: unknown key",
            ),
            (
                {"task": {"url": "https://e.com", "goal": "g", "browser": {"proxy": {"server": "http://p:1"}}}},
                "browser.proxy: refused",
            ),
            ({"task": {"url": "https://example.com", "goal": "Type {{PASSWORD}}"}}, "goal: a {{NAME}} secret"),
            (
                {"task": {"url": "https://example.com", "goal": "g", "max_steps": 0}},
                "max_steps: Input should be greater than 0",
            ),
            ({"task": {"task": "miniwob/click-test", "expect": "x"}}, "judged by its page"),
            ({"task": "miniwob/click-test", "foo": 1, "bar": 2}, "unknown: bar, foo"),
            ({"task": {"task": "miniwob/click-test", "seed": "3"}}, "a seed is an integer"),
            ({"task": {"task": "miniwob/click-test", "seed": True}}, "a seed is an integer"),
            ({"task": {"task": "miniwob/click-test", "seed": 2**64}}, "a seed is an integer"),
            ({"task": {"url": "https://example.com", "goal": "g"}}, "reward 'task' needs a benchmark task"),
            ({"task": {"url": "https://e.com/" + "a" * 9000, "goal": "g"}}, "at most 8192 characters"),
            ({"task": {"url": "https://example.com", "goal": HUGE[:30000]}}, "characters"),
            ({"task": {"huge": HUGE}}, "longer than"),
        ):
            reply = await http(served, "POST", "/reset", body)
            assert reply.status_code == 400, (body if len(str(body)) < 200 else "huge", reply.text[:300])
            assert words in one_line(reply.json()["detail"]), (words, reply.json()["detail"])
        # Bodies that do not validate: openenv-core's 422 with pydantic's list; too large: 413.
        for raw in (b"not json", b"[]", b'{"seed": "x"}', b'{"seed": -1}', b'{"episode_id": 5}'):
            reply = await http(served, "POST", "/reset", raw=raw)
            assert reply.status_code == 422 and isinstance(reply.json()["detail"], list), (raw, reply.text[:200])
        reply = await http(served, "POST", "/reset", raw=b'{"task": "' + b"x" * (9 * MiB) + b'"}')
        assert reply.status_code == 413 and "larger than" in one_line(reply.json()["detail"])

        # /step: over HTTP every step is a step before any reset (openenv-core's stateless form).
        for body in ({"action": {"reply": "{}"}}, {"action": {"action": {"action": "scroll"}}}):
            reply = await http(served, "POST", "/step", body)
            assert reply.status_code == 400 and "no running episode" in one_line(reply.json()["detail"])
        reply = await http(served, "POST", "/step", {"action": {}})
        assert reply.status_code == 400 and "needs 'reply'" in one_line(reply.json()["detail"])
        for body in (
            {},
            {"action": "x"},
            {"action": {"reply": 5}},
            {"action": {"unknown": 1}},
            {"action": {"point": "a"}},
        ):
            reply = await http(served, "POST", "/step", body)
            assert reply.status_code == 422, (body, reply.text[:200])

        await ws_messages(served)
        await client_calls(served)
        await ws_oversized(served)
        assert (await http(served, "GET", "/health")).status_code == 200
    log = "".join(served.log)
    assert "Traceback" not in log and " 500" not in log and "Internal Server Error" not in log, log[-3000:]


async def ws_messages(served: Served) -> None:
    """Malformed messages on ``/ws``: openenv-core's error message, the session kept."""
    async with connect(served.url.replace("http://", "ws://") + "/ws", max_size=64 * MiB) as ws:

        async def error_of(message: str) -> dict[str, Any]:
            await ws.send(message)
            reply = json.loads(await ws.recv())
            assert reply["type"] == "error", reply
            data: dict[str, Any] = reply["data"]
            return data

        assert (await error_of("not json"))["code"] == "INVALID_JSON"
        assert (await error_of('{"type": "nope"}'))["code"] == "UNKNOWN_TYPE"
        assert (await error_of('{"type": "reset", "data": "x"}'))["code"] == "VALIDATION_ERROR"
        assert (await error_of('{"type": "step", "data": {"bogus": 1}}'))["code"] == "VALIDATION_ERROR"
        for data, words in (
            ({}, "reset needs a task"),
            ({"task": "miniwob/click-test", "seed": "x"}, "a seed is an integer"),
            ({"task": "miniwob/click-test", "seed": -3}, "a seed is an integer"),
            ({"task": "miniwob/click-test", "episode_id": 5}, "episode_id is a string"),
            ({"task": "miniwob/click-test", "foo": 1}, "unknown: foo"),
            ({"task": "miniwob/" + HUGE}, "longer than"),
            ({"task": {"url": "file:///etc/passwd", "goal": "g"}}, "reward 'task' needs a benchmark task"),
        ):
            error = await error_of(json.dumps({"type": "reset", "data": data}))
            assert error["code"] == "EXECUTION_ERROR" and words in one_line(error["message"]), (words, error)
        error = await error_of(json.dumps({"type": "step", "data": {"reply": "{}"}}))
        assert "no running episode" in one_line(error["message"])  # a step before any reset
        error = await error_of(json.dumps({"type": "step", "data": {"reply": HUGE}}))
        assert "longer than" in one_line(error["message"])
        await ws.send(json.dumps({"type": "state"}))
        assert json.loads(await ws.recv())["type"] == "state"  # the session lives on


async def client_calls(served: Served) -> None:
    """The same through openenv-core's clients: each a raised error, a step after the end included."""
    async with WebagentClient(base_url=served.url) as client:
        for kwargs, words in (
            ({}, "reset needs a task"),
            ({"task": "miniwob/nope"}, "no MiniWoB"),
            ({"task": "miniwob/click-test", "seed": "3"}, "a seed is an integer"),
        ):
            with pytest.raises(RuntimeError, match=words):
                await client.reset(**kwargs)
        with pytest.raises(RuntimeError, match="no running episode"):
            await client.step(WebAction(reply="{}"))
        result = await client.reset(task="miniwob/click-test", seed=1)
        result = await client.step(WebAction(action={"action": "scroll", "direction": "down"}))
        assert result.done and result.observation.truncated_by == "max_steps"  # --max-steps 1
        with pytest.raises(RuntimeError, match="no running episode"):  # a step after done
            await client.step(WebAction(action={"action": "scroll", "direction": "down"}))
        assert (await client.state()).done
    generic = GenericEnvClient(base_url=served.url)
    try:
        with pytest.raises(RuntimeError, match="reset needs a task"):
            await generic.reset()
    finally:
        await generic.close()


async def ws_oversized(served: Served) -> None:
    """A message over the server's limit closes that connection (1009), nothing else."""
    async with connect(served.url.replace("http://", "ws://") + "/ws", max_size=64 * MiB) as ws:
        with pytest.raises(ConnectionClosedError) as closed:
            await ws.send(json.dumps({"type": "reset", "data": {"task": "x" * (9 * MiB)}}))
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


async def test_an_empty_reset_draws_the_next_default_task_and_a_seed_repeats(tmp_path: Path) -> None:
    async with serve(tmp_path, "--tasks", "miniwob", "--seed", "7") as served:
        reply = await http(served, "POST", "/reset", {})  # the case: a 500 before
        assert reply.status_code == 200 and reply.json()["observation"]["url"].endswith(".html")
        async with WebagentClient(base_url=served.url) as client:
            result = await client.reset()
            state = await client.state()
            assert state.task_id.startswith("miniwob/") and isinstance(state.seed, int) and result.observation.goal
            # A seed and no task: the task and page of that seed, the same every time.
            first = (await client.reset(seed=5)).observation
            again = (await client.reset(seed=5)).observation
            assert (first.url, first.goal, first.screenshot) == (again.url, again.goal, again.screenshot)
            assert (await client.state()).seed == 5
            # An animated page too: the same first frame for the same seed (the page's clock is the seed's).
            frames = [
                (await client.reset(task="miniwob/chase-circle", seed=s)).observation.screenshot for s in (3, 3, 4)
            ]
            assert frames[0] == frames[1] != frames[2]
        assert (await http(served, "GET", "/webagent/status")).json()["drawn"] == 4  # the named tasks are not drawn


def test_bad_default_tasks_are_one_line_usage_errors(tmp_path: Path) -> None:
    web = tmp_path / "web.jsonl"
    web.write_text('{"id": "w", "url": "https://example.com", "goal": "Find it"}\n')
    signed_in = tmp_path / "signed-in.jsonl"
    signed_in.write_text('{"id": "s", "task": "miniwob/click-test", "browser": {"locale": "de-DE"}}\n')
    for args, words in (
        (["--tasks", "nope"], "no such file, nor a task set (known: miniwob"),
        (["--tasks", str(web)], "is a web task; --reward task serves benchmark tasks only"),
        (["--tasks", str(web), "--reward", "reference"], "has no reference answer"),
        (["--tasks", str(signed_in)], "has 'browser' settings"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "webagent", "env", "serve", "--port", "0", *args],
            capture_output=True,
            text=True,
            timeout=180,
            env=child_env(),
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and words in lines[0], (args, lines)
