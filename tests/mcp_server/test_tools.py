"""The MCP tools in process, through the SDK's client: what each returns, and one clear tool
error per bad call."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from PIL import Image
from pydantic import SecretStr

from webagent.mcp_server.cli import parse_http
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory
from .conftest import GOAL, Connect, dead_url, local_config, script, text_of

pytestmark = pytest.mark.e2e


async def test_the_tools_are_listed_with_their_schemas(model_server: ServerFactory, connect: Connect) -> None:
    async with model_server(script()) as server, connect(local_config(server)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(tools) == ["act", "check", "close_session", "extract", "open_session", "run_task", "screenshot"]
    assert tools["run_task"].input_schema["required"] == ["url", "goal"]
    assert tools["check"].input_schema["required"] == ["session_id", "statement"]
    assert tools["run_task"].output_schema is not None
    assert "validator" in (tools["check"].description or "")
    for tool in tools.values():  # the docstring's words, not its indentation
        description = tool.description or ""
        assert description and description == description.strip() and "\n " not in description, tool.name
    assert tools["run_task"].description is not None and "  " not in tools["run_task"].description
    # Every output property has a type (extract's value: any JSON value, each kind named).
    value = (tools["extract"].output_schema or {})["properties"]["value"]
    kinds = {option.get("type") for option in value.get("anyOf", [value])}
    assert {"object", "array", "string", "number", "boolean", "null"} <= kinds, value


async def test_run_task_returns_the_validated_answer_and_run_directory(
    model_server: ServerFactory, connect: Connect, site: SiteServer, tmp_path: Path
) -> None:
    async with model_server(script()) as server, connect(local_config(server)) as client:
        result = await client.call_tool("run_task", {"url": f"{site.url}/catalog/", "goal": GOAL})
    assert not result.is_error
    data = result.structured_content
    assert data is not None
    assert (data["success"], data["answer"], data["stop_reason"], data["steps"]) == (True, "$12.50", "answered", 3)
    run_dir = Path(data["run_dir"])
    assert run_dir.parent == tmp_path / "runs" and (run_dir / "report.html").is_file()
    assert json.loads(text_of(result))["answer"] == "$12.50"  # the same as text for clients without structure


async def test_a_kept_session_acts_checks_extracts_and_shows_itself(
    model_server: ServerFactory, connect: Connect, site: SiteServer, tmp_path: Path
) -> None:
    async with model_server(script()) as server, connect(local_config(server)) as client:
        opened = await client.call_tool("open_session", {"url": f"{site.url}/catalog/"})
        assert not opened.is_error and opened.structured_content is not None
        sid = opened.structured_content["session_id"]
        assert opened.structured_content["url"] == f"{site.url}/catalog/"
        acted = await client.call_tool("act", {"session_id": sid, "goal": GOAL})
        check = await client.call_tool(
            "check", {"session_id": sid, "statement": "The page shows the Blue Widget at $12.50"}
        )
        schema = {"type": "object", "properties": {"name": {"type": "string"}, "price": {"type": "string"}}}
        extracted = await client.call_tool(
            "extract", {"session_id": sid, "what": "the name and price", "json_schema": schema}
        )
        shot = await client.call_tool("screenshot", {"session_id": sid})
        closed = await client.call_tool("close_session", {"session_id": sid})
        again = await client.call_tool("check", {"session_id": sid, "statement": "anything"})
    assert acted.structured_content is not None and acted.structured_content["success"]
    assert acted.structured_content["final_url"].endswith("/catalog/product/blue-widget")
    assert check.structured_content == {
        "holds": True,
        "feedback": "The statement holds: it shows the Blue Widget at $12.50.",
        "url": f"{site.url}/catalog/product/blue-widget",
        "run_dir": str(tmp_path / "runs" / f"session-{sid}" / "check-1"),
    }
    assert extracted.structured_content == {"value": {"name": "Blue Widget", "price": "$12.50"}}
    (image,) = shot.content
    assert image.type == "image" and image.mime_type == "image/png"
    assert Image.open(io.BytesIO(base64.b64decode(image.data))).size == (1280, 800)
    assert closed.structured_content == {"session_id": sid, "closed": True}
    assert again.is_error and f"no open session has the id {sid!r}" in text_of(again)
    assert (tmp_path / "runs" / f"session-{sid}" / "act-1" / "report.html").is_file()


async def test_extract_without_a_schema_is_text_and_a_bad_reply_is_a_tool_error(
    model_server: ServerFactory, connect: Connect, site: SiteServer
) -> None:
    data = script()
    data["extracts"].insert(0, {"match": "name only", "value": {"value": "{name}"}})
    async with model_server(data) as server, connect(local_config(server)) as client:
        sid = await client.call_tool("open_session", {"url": f"{site.url}/catalog/product/blue-widget"})
        session = sid.structured_content["session_id"] if sid.structured_content else ""
        text = await client.call_tool("extract", {"session_id": session, "what": "the name only"})
        garbage = await client.call_tool("extract", {"session_id": session, "what": "garbage"})
        bad_schema = await client.call_tool(
            "extract", {"session_id": session, "what": "the product", "json_schema": {"type": "nonsense"}}
        )
    assert text.structured_content == {"value": "Blue Widget"}
    assert garbage.is_error and "ExtractionError: could not extract 'garbage'" in text_of(garbage)
    assert bad_schema.is_error and "json_schema is not a valid JSON schema" in text_of(bad_schema)


async def test_bad_calls_are_one_clear_tool_error_each(
    model_server: ServerFactory, connect: Connect, site: SiteServer
) -> None:
    async with model_server(script()) as server:
        config = local_config(server)
        async with connect(config, max_sessions=1) as client:
            unknown = await client.call_tool("act", {"session_id": "nope", "goal": "x"})
            bad_url = await client.call_tool("run_task", {"url": "not a url", "goal": GOAL})
            dead_site = await client.call_tool("open_session", {"url": f"{dead_url()}/"})
            first = await client.call_tool("open_session", {"url": f"{site.url}/catalog/"})
            second = await client.call_tool("open_session", {"url": f"{site.url}/catalog/"})
            missing = await client.call_tool("run_task", {"url": f"{site.url}/catalog/"})
            no_steps = await client.call_tool("run_task", {"url": f"{site.url}/catalog/", "goal": GOAL, "max_steps": 0})
            wrong_type = await client.call_tool("act", {"session_id": "x", "goal": "y", "max_steps": "many"})
        fenced = config.model_copy(deep=True)
        fenced.browser.allowed_domains = ["example.com"]
        async with connect(fenced) as client:
            refused = await client.call_tool("open_session", {"url": f"{site.url}/catalog/"})
            refused_run = await client.call_tool("run_task", {"url": f"{site.url}/catalog/", "goal": GOAL})
        down = config.model_copy(deep=True)
        for role in ("policy", "localizer", "validator"):
            down.role(role).base_url = f"{dead_url()}/{role}/v1"
            down.role(role).max_retries = 0
        async with connect(down) as client:
            no_model = await client.call_tool("run_task", {"url": f"{site.url}/catalog/", "goal": GOAL})
            sid = await client.call_tool("open_session", {"url": f"{site.url}/catalog/"})
            session = sid.structured_content["session_id"] if sid.structured_content else ""
            no_check = await client.call_tool("check", {"session_id": session, "statement": "anything"})
    expected = {
        "unknown": (unknown, "SessionError: no open session has the id 'nope'"),
        "bad_url": (bad_url, "InputError: invalid URL 'not a url'"),
        "dead_site": (dead_site, "NavigationError: cannot open http://127.0.0.1:"),
        "limit": (second, "SessionError: this server keeps at most 1 open session(s)"),
        "missing": (missing, "Error executing tool run_task: invalid arguments: goal: field required"),
        "no_steps": (
            no_steps,
            "Error executing tool run_task: invalid arguments: max_steps: input should be greater than or equal to 1 "
            "(got 0)",
        ),
        "wrong_type": (wrong_type, "Error executing tool act: invalid arguments: max_steps: input should be"),
        "refused": (refused, "NavigationError: cannot open"),
        "refused_run": (refused_run, "NavigationError: cannot open"),
        "no_model": (no_model, "the run failed: the policy model at http://127.0.0.1:"),
        "no_check": (no_check, "ModelUnavailableError: the validator model at http://127.0.0.1:"),
    }
    for name, (result, message) in expected.items():
        assert result.is_error, name
        assert message in text_of(result), (name, text_of(result))
        assert "Traceback" not in text_of(result), name
        assert "\n" not in text_of(result), (name, text_of(result))  # one line, as docs/mcp.md says
    assert not first.is_error


async def test_secrets_are_named_never_shown(
    model_server: ServerFactory, connect: Connect, site: SiteServer, tmp_path: Path
) -> None:
    value = "hunter2-c0de"
    data = script()  # a model that reads the secret off the page and repeats it
    data["extracts"].insert(0, {"match": "search query", "value": {"value": f"the query is {value}"}})
    async with model_server(data) as server:
        config = local_config(server)
        config.secrets = {"ACCESS_CODE": SecretStr(value)}
        async with connect(config) as client:
            info = client.instructions or ""
            opened = await client.call_tool("open_session", {"url": f"{site.url}/catalog/search?q={value}"})
            sid = opened.structured_content["session_id"] if opened.structured_content else ""
            check = await client.call_tool("check", {"session_id": sid, "statement": "search results are shown"})
            shown = await client.call_tool("extract", {"session_id": sid, "what": "the search query"})
    assert "ACCESS_CODE" in info and value not in info
    for result in (opened, check, shown):
        assert value not in text_of(result) and value not in json.dumps(result.structured_content)
    assert opened.structured_content is not None and "{{ACCESS_CODE}}" in opened.structured_content["url"]
    assert shown.structured_content == {"value": "the query is {{ACCESS_CODE}}"}
    assert check.structured_content is not None and check.structured_content["holds"]
    # Nor in what the calls wrote: the run directories of the check and the extraction.
    written = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert any(p.name == "trajectory.jsonl" for p in written)
    assert all(value.encode() not in p.read_bytes() for p in written)


def test_parse_http() -> None:
    from webagent.errors import InputError

    assert parse_http("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_http(":0") == ("127.0.0.1", 0)
    assert parse_http("[::1]:9000") == ("::1", 9000)
    with pytest.raises(InputError, match="HOST:PORT"):
        parse_http("8765x")


def test_without_the_sdk_the_command_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from webagent.cli.parser import build_parser, config_from_args
    from webagent.errors import ConfigError, InputError
    from webagent.mcp_server.cli import run_mcp

    def run(*flags: str) -> int:  # run_mcp, not main: main configures the process's logging
        args = build_parser().parse_args(["mcp", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", *flags])
        return run_mcp(args, config_from_args(args))

    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.setitem(sys.modules, name, None)  # import mcp... -> ModuleNotFoundError
    for name in ("webagent.mcp_server.server", "webagent.mcp_server.tools"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ConfigError, match=r"^webagent mcp needs the MCP SDK: pip install 'webagent\[mcp\]'$"):
        run()
    with pytest.raises(InputError, match="--http expects HOST:PORT"):
        run("--http", "nonsense")
    with pytest.raises(InputError, match="--max-sessions must be at least 1"):
        run("--max-sessions", "0")
