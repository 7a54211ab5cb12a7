"""Several servers per role: least-loaded choice, session stickiness, failover, and the config."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pydantic import ValidationError

from webagent.config import RoleConfig, load_config
from webagent.errors import ConfigError, ModelUnavailableError
from webagent.model import replies as replies_module
from webagent.model.client import ModelClient
from webagent.model.endpoints import EndpointPool
from webagent.records import RoleUsage

from ..conftest import ServerFactory

MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Task: anything\nCandidate answer:\nyes"}]
SCRIPT: dict[str, Any] = {"tasks": [{"id": "t", "match": "anything", "validator": {"accept": ["yes"]}}]}


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replies_module, "RETRY_BASE_S", 0.01)


def two_server_config(a: Any, b: Any, **extra: Any) -> RoleConfig:
    return RoleConfig(base_url=[a.base_url("validator"), b.base_url("validator")], model="m", max_retries=1, **extra)


def counts(*servers: Any) -> list[int]:
    return [s.request_counts["validator"] for s in servers]


# ---------------------------------------------------------------- config


def test_base_url_forms() -> None:
    assert RoleConfig(base_url="http://a:8000/v1/").base_url == "http://a:8000/v1"
    assert RoleConfig(base_url="http://a:8000/v1").endpoints() == ["http://a:8000/v1"]
    listed = RoleConfig(base_url=["http://a/v1", "https://b/v1/"])
    assert listed.base_url == ["http://a/v1", "https://b/v1"]
    assert listed.endpoints() == ["http://a/v1", "https://b/v1"]
    comma = RoleConfig(base_url=" http://a/v1 , http://b/v1/,http://c/v1")
    assert comma.endpoints() == ["http://a/v1", "http://b/v1", "http://c/v1"]
    assert RoleConfig().endpoints() == []


@pytest.mark.parametrize(
    "value",
    ["ftp://a/v1", "a.example.com/v1", "", "http://a/v1,", "http://a/v1, b:8000", ["http://a/v1", "ws://b"], [], 5],
)
def test_base_url_rejects_non_http(value: Any) -> None:
    with pytest.raises(ValidationError):
        RoleConfig(base_url=value)


def test_base_url_list_from_env_and_toml(tmp_path: Any) -> None:
    config = load_config(env={"WEBAGENT_POLICY_BASE_URL": "http://a:1/v1,http://b:2/v1"})
    assert config.policy.endpoints() == ["http://a:1/v1", "http://b:2/v1"]
    toml = tmp_path / "c.toml"
    toml.write_text('[localizer]\nbase_url = ["http://a:1/v1", "http://b:2/v1"]\n')
    assert load_config(toml, env={}).localizer.endpoints() == ["http://a:1/v1", "http://b:2/v1"]
    with pytest.raises(ConfigError, match=r"policy\.base_url"):
        load_config(env={"WEBAGENT_POLICY_BASE_URL": "http://a:1/v1,gopher://b"})


# ---------------------------------------------------------------- pick


def test_pick_least_loaded() -> None:
    pool = EndpointPool("policy", RoleConfig(base_url="http://a/v1,http://b/v1,http://c/v1", model="m"))
    a, b, c = pool.endpoints
    assert [e.base_url for e in pool.endpoints] == ["http://a/v1", "http://b/v1", "http://c/v1"]
    assert pool.pick() is a  # all idle: the first
    a.in_flight, b.in_flight, c.in_flight = 2, 1, 3
    assert pool.pick() is b  # fewest requests in flight
    b.in_flight = 2
    a.sessions, b.sessions = 5, 1
    assert pool.pick() is b  # tie on requests: fewest sessions
    assert pool.pick(exclude=b) is a
    b.down_until = time.monotonic() + 30
    assert pool.pick() is a  # a server marked down comes last, however idle
    a.down_until = c.down_until = time.monotonic() + 30
    assert pool.pick() is b  # all down: back to load
    b.down_until = time.monotonic() - 1  # cooled down
    assert pool.pick() is b


def test_single_endpoint_pool_excludes_nothing() -> None:
    pool = EndpointPool("policy", RoleConfig(base_url="http://a/v1", model="m"))
    only = pool.endpoints[0]
    assert pool.pick(exclude=only) is only


# ---------------------------------------------------------------- sessions against real servers


async def test_sessions_stick_and_spread(model_server: ServerFactory) -> None:
    async with model_server(SCRIPT) as a, model_server(SCRIPT) as b:
        pool = EndpointPool("validator", two_server_config(a, b))
        ea, eb = pool.endpoints
        first = ModelClient("validator", pool.config, pool)
        for _ in range(3):
            await first.complete(MESSAGES, usage=RoleUsage())
        assert counts(a, b) == [3, 0]
        assert first.endpoint is ea and ea.sessions == 1 and eb.sessions == 0
        assert ea.in_flight == 0

        second = ModelClient("validator", pool.config, pool)  # created while the first holds A
        await second.complete(MESSAGES, usage=RoleUsage())
        assert counts(a, b) == [3, 1]
        assert second.endpoint is eb and eb.sessions == 1

        # Concurrent calls from both: each stays on its own server.
        await asyncio.gather(
            *(first.complete(MESSAGES, usage=RoleUsage()) for _ in range(4)),
            *(second.complete(MESSAGES, usage=RoleUsage()) for _ in range(2)),
        )
        assert counts(a, b) == [7, 3]

        third = ModelClient("validator", pool.config, pool)  # a tie again: the first server
        await third.complete(MESSAGES, usage=RoleUsage())
        assert third.endpoint is ea and ea.sessions == 2 and counts(a, b) == [8, 3]

        for c in (first, second, third):
            c.release()
        assert ea.sessions == eb.sessions == 0
        assert first.endpoint is None
        first.release()  # twice is harmless
        assert ea.sessions == 0
        await pool.aclose()


async def test_a_session_follows_another_role_s_server(model_server: ServerFactory) -> None:
    """A validator continuing the policy's conversation goes to the server the policy stuck to."""
    async with model_server(SCRIPT) as a, model_server(SCRIPT) as b:
        pool = EndpointPool("validator", two_server_config(a, b))
        ea, eb = pool.endpoints
        busy = ModelClient("validator", pool.config, pool)
        busy.follow(eb.base_url)  # unstuck: sticks to it
        assert busy.endpoint is eb and eb.sessions == 1
        client = ModelClient("validator", pool.config, pool)
        await client.complete(MESSAGES, usage=RoleUsage())
        assert client.endpoint is ea and counts(a, b) == [1, 0]
        client.follow(eb.base_url)
        await client.complete(MESSAGES, usage=RoleUsage())
        assert client.endpoint is eb and counts(a, b) == [1, 1]
        assert (ea.sessions, eb.sessions) == (0, 2)
        client.follow("http://127.0.0.1:9/v1")  # not one of this role's servers: stays where it is
        assert client.endpoint is eb
        await pool.aclose()


async def test_concurrently_created_sessions_spread(model_server: ServerFactory) -> None:
    """Sessions that start together (requests in flight, no session counted yet) spread too."""
    slow = {**SCRIPT, "latency_s": 0.3}
    async with model_server(slow) as a, model_server(slow) as b:
        pool = EndpointPool("validator", two_server_config(a, b))
        clients = [ModelClient("validator", pool.config, pool) for _ in range(4)]
        await asyncio.gather(*(c.complete(MESSAGES, usage=RoleUsage()) for c in clients))
        assert counts(a, b) == [2, 2]
        assert [e.sessions for e in pool.endpoints] == [2, 2]
        for c in clients:
            await c.aclose()
        assert [e.sessions for e in pool.endpoints] == [0, 0]
        await pool.aclose()


async def test_failover_to_the_other_server(model_server: ServerFactory) -> None:
    async with model_server(SCRIPT) as a, model_server(SCRIPT) as b:
        pool = EndpointPool("validator", two_server_config(a, b))
        ea, eb = pool.endpoints
        session = ModelClient("validator", pool.config, pool)
        await session.complete(MESSAGES, usage=RoleUsage())
        await session.complete(MESSAGES, usage=RoleUsage())
        assert session.endpoint is ea and counts(a, b) == [2, 0]

        await a.stop()
        usage = RoleUsage()
        completion = await session.complete(MESSAGES, usage=usage)
        assert '"success": true' in completion.text
        assert counts(b) == [1]
        assert session.endpoint is eb
        assert (ea.sessions, eb.sessions) == (0, 1)
        assert ea.down_until > time.monotonic() + 20  # cooling down
        assert usage.calls == 1 and usage.failures == 0 and usage.retries >= 1

        await session.complete(MESSAGES, usage=RoleUsage())  # sticks to B now
        assert counts(b) == [2] and session.endpoint is eb

        newcomer = ModelClient("validator", pool.config, pool)  # A is down: B, despite its session
        await newcomer.complete(MESSAGES, usage=RoleUsage())
        assert newcomer.endpoint is eb and counts(b) == [3]

        session.release()
        assert eb.sessions == 1 and session.endpoint is None
        newcomer.release()
        assert eb.sessions == 0
        await pool.aclose()


async def test_all_servers_down_is_an_error(model_server: ServerFactory) -> None:
    async with model_server(SCRIPT) as a, model_server(SCRIPT) as b:
        pool = EndpointPool("validator", two_server_config(a, b))
        await a.stop()
        await b.stop()
        session = ModelClient("validator", pool.config, pool)
        usage = RoleUsage()
        with pytest.raises(ModelUnavailableError, match="could not be reached"):
            await session.complete(MESSAGES, usage=usage)
        assert usage.failures == 1
        assert all(e.in_flight == 0 for e in pool.endpoints)
        session.release()
        assert [e.sessions for e in pool.endpoints] == [0, 0]
        await pool.aclose()
