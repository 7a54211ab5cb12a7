"""What one authenticated client of ``webagent env serve`` may hold: sessions at once (its own and all
clients'), and the model spend of the whole server, whose end is an infrastructure failure, never a
reward. Through openenv-core's own client and plain HTTP."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from webagent.env.openenv import WebAction, WebagentClient
from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory, load_task_script
from .server import TOKEN, serve, status

pytestmark = pytest.mark.browser


async def holding(url: str, token: str | None) -> WebagentClient:
    """A client that holds a session (connected, its episode started)."""
    client = WebagentClient(base_url=url, token=token)
    await client.reset(task="miniwob/click-test", seed=1)
    return client


async def refused(url: str, token: str | None) -> str:
    """The error openenv-core's client raises for a session the server does not take."""
    client = WebagentClient(base_url=url, token=token)
    try:
        with pytest.raises(RuntimeError) as error:
            await client.reset(task="miniwob/click-test", seed=1)
    finally:
        with contextlib.suppress(Exception):
            await client.close()
    assert "CAPACITY_REACHED" in str(error.value)
    return str(error.value)


async def test_sessions_per_client_and_in_all(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    a, b, c = (f"{TOKEN}-{n}" for n in "abc")
    tokens.write_text(f"{a}\n{b}\n{c}\n")
    bounds = ("--max-sessions", "2", "--max-sessions-per-client", "1")
    async with serve(tmp_path, "--auth-token-file", str(tokens), *bounds) as served:
        url = served.url
        first = await holding(url, a)
        try:
            # Several tokens: a client is its token, wherever it connects from.
            assert "this client holds 1 sessions" in await refused(url, a)
            async with httpx.AsyncClient(timeout=60) as http:
                reset = await http.post(
                    f"{url}/reset", json={"task": "miniwob/click-test"}, headers={"Authorization": f"Bearer {a}"}
                )
            assert reset.status_code == 429 and "--max-sessions-per-client 1" in reset.json()["detail"]
            second = await holding(url, b)
            try:
                assert "the server holds 2 sessions" in await refused(url, c)  # in all
            finally:
                await second.close()
        finally:
            await first.close()
        # Closed sessions are given back.
        for token in (a, c):
            client = await holding(url, token)
            await client.close()
        assert (await status(url, a))["open_contexts"] <= 2
    assert not any("Traceback" in line for line in served.log), served.log


async def test_without_several_tokens_a_client_is_its_address(tmp_path: Path) -> None:
    async with serve(tmp_path, "--max-sessions-per-client", "1") as served:
        first = await holding(served.url, None)
        try:
            assert "this client holds 1 sessions" in await refused(served.url, None)
        finally:
            await first.close()


async def test_the_server_s_budget_ends_episodes_as_failures_never_as_rewards(
    tmp_path: Path, site: SiteServer, model_server: ServerFactory, local_tasks: dict[str, Any]
) -> None:
    task = {"url": f"{site.url}/catalog/product/blue-widget", "goal": local_tasks["catalog-price"]["goal"]}
    answer = WebAction(action={"action": "answer", "content": "$12.50"})
    async with model_server(load_task_script("catalog-price")) as fake:
        flags = ["--reward", "validator", "--allow-domain", f"127.0.0.1:{site.port}", "--api-key", "offline"]
        flags += ["--validator-base-url", f"{fake.url}/validator/v1", "--validator-model", PROFILE_MODELS["holo1.5"]]
        async with serve(tmp_path, *flags, "--server-budget-calls", "1") as served:
            async with WebagentClient(base_url=served.url) as client:
                await client.reset(task=task)
                result = await client.step(answer)  # the validator's one call
                assert result.done and result.reward == 1.0
            async with WebagentClient(base_url=served.url) as client:  # another session: the same budget
                await client.reset(task=task)
                with pytest.raises(RuntimeError, match=r"the environment failed \(budget\): the server's budget"):
                    await client.step(answer)
                state = await client.state()
                assert state.done and state.reward is None and state.failure and "server's budget" in state.failure
            spent = (await status(served.url))["budgets"]
            assert spent == [{"scope": "server", "calls": 1, "tokens": spent[0]["tokens"], "usd": 0.0}]
