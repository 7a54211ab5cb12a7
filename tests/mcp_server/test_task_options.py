"""``run_task``'s task options (``expect``, ``browser``, ``profile``): what a client may not set is
refused in one line naming it, before anything opens (the runs themselves: tests/tasks/test_floor.py)."""

from __future__ import annotations

from pathlib import Path

from ..conftest import ServerFactory
from .conftest import Connect, local_config, script, text_of

URL = "http://127.0.0.1:9/"


async def test_what_a_client_may_not_set_is_refused_by_name(
    model_server: ServerFactory, connect: Connect, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    async with model_server(script()) as server, connect(local_config(server), profile_dir=profiles) as client:
        state = await client.call_tool("run_task", {"url": URL, "goal": "g", "browser": {"storage_state": "/etc/x"}})
        proxy = await client.call_tool("run_task", {"url": URL, "goal": "g", "browser": {"proxy": "http://p:1"}})
        unknown = await client.call_tool("run_task", {"url": URL, "goal": "g", "browser": {"locale_x": "fr"}})
        no_state = await client.call_tool("run_task", {"url": URL, "goal": "g", "profile": "never-saved"})
        bad_name = await client.call_tool("run_task", {"url": URL, "goal": "g", "profile": "../etc/x"})
        long_expect = await client.call_tool("run_task", {"url": URL, "goal": "g", "expect": "x" * 100_000})
    assert state.is_error and "browser.storage_state: a client of the MCP server may not set it" in text_of(state)
    assert "profile=" in text_of(state)
    assert proxy.is_error and "browser.proxy: a client of the MCP server may not set it" in text_of(proxy)
    assert unknown.is_error and "browser.locale_x: unknown key" in text_of(unknown)
    assert no_state.is_error and "profile 'never-saved' has no saved state yet" in text_of(no_state)
    assert bad_name.is_error and "is not valid" in text_of(bad_name)
    assert long_expect.is_error and text_of(long_expect).count("\n") == 0 and "expect" in text_of(long_expect)
    assert not list(profiles.iterdir())  # nothing written
