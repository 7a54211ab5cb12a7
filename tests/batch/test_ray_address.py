"""``batch --ray ADDRESS``: an address where nothing listens fails in seconds, with one line, before
``ray.init`` (which retries for about two minutes). No Ray needed: the check runs before it."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import webagent.batch.ray as raybatch
from webagent.batch import BatchRunner, RayCluster
from webagent.batch.ray import check_reachable
from webagent.browser.devtools import free_port
from webagent.config import AgentConfig
from webagent.errors import ConfigError
from webagent.tasks import TaskSpec


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    return free_port()


@pytest.fixture
def listening() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("prefix", ["", "ray://"])
def test_a_closed_port_is_one_line_config_error_at_once(closed_port: int, prefix: str) -> None:
    address = f"{prefix}127.0.0.1:{closed_port}"
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        check_reachable(address)
    assert time.monotonic() - started < 2.0
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"cannot connect to Ray at {address}: connection refused;")
    assert "ray start --head" in message


def test_an_address_that_listens_passes(listening: int) -> None:
    check_reachable(f"127.0.0.1:{listening}")
    check_reachable(f"ray://127.0.0.1:{listening}")


@pytest.mark.parametrize("address", [None, "", "auto", "local", "127.0.0.1", "ray://head", "host:port"])
def test_addresses_without_a_port_are_left_to_ray(address: str | None) -> None:
    check_reachable(address)  # no connection attempted, nothing raised


def test_an_unanswered_address_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_answer(address: tuple[str, int], timeout: float) -> None:
        assert address == ("10.255.255.1", 6379) and timeout == 0.25
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", no_answer)
    with pytest.raises(ConfigError, match=r"^cannot connect to Ray at 10\.255\.255\.1:6379: no answer within 0\.25 s;"):
        check_reachable("10.255.255.1:6379", timeout_s=0.25)


def test_the_runner_checks_before_ray_init(closed_port: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class FakeRay:
        def __init__(self) -> None:
            self.inits: list[dict[str, Any]] = []

        def is_initialized(self) -> bool:
            return False

        def init(self, **kwargs: Any) -> None:
            self.inits.append(kwargs)

    fake = FakeRay()
    monkeypatch.setattr(raybatch, "import_ray", lambda: fake)
    tasks = [TaskSpec(id="t", url="http://127.0.0.1:9/", goal="g")]
    runner = BatchRunner(AgentConfig(), tasks, tmp_path, ray=RayCluster(address=f"127.0.0.1:{closed_port}"))
    with pytest.raises(ConfigError, match="connection refused"):
        asyncio.run(runner.run())
    assert fake.inits == []
    assert (tmp_path / "results.jsonl").read_text() == ""  # nothing lost, nothing half-written
