"""Who chose a start URL, and what it lets the run reach (``webagent.runtime.access``)."""

from __future__ import annotations

import pytest

from webagent.config import AgentConfig
from webagent.errors import InputError, NavigationError
from webagent.runtime import Runtime
from webagent.runtime.access import client_start, data_start, host_port, task_set_policy


def _runtime(**browser: object) -> Runtime:
    config = AgentConfig.model_validate(
        {"policy": {"base_url": "http://127.0.0.1:9/v1", "model": "m"}, "browser": browser}
    )
    return Runtime(config, require=())


def test_host_port() -> None:
    assert host_port("http://127.0.0.1:8000/x") == "127.0.0.1:8000"
    assert host_port("https://Example.COM/") == "example.com:443"
    assert host_port("http://[::1]/") == "[::1]:80"
    assert host_port("file:///etc/passwd") is None


async def test_a_clients_start_is_web_only_and_not_leave_to_reach_local_addresses() -> None:
    runtime = _runtime()
    for url in ("file:///etc/passwd", "about:blank", "data:text/html,x", "javascript:alert(1)"):
        with pytest.raises(InputError, match=r"http and https URLs only|invalid URL"):
            await client_start(runtime, url, server="the environment server")
    for url in ("http://127.0.0.1:8000/", "http://localhost/", "http://[::ffff:127.0.0.1]/", "http://10.0.0.5/"):
        with pytest.raises(NavigationError, match="the environment server opens private"):
            await client_start(runtime, url, server="the environment server")
    url, policy = await client_start(runtime, "http://93.184.215.14/", server="the environment server")
    assert policy.block_private and not policy.allow_file
    assert policy.check("file:///root/", navigation=True) is not None
    # The operator's leave: an entry naming the host, or private networks allowed.
    allowed = _runtime(allowed_domains=["127.0.0.1:8000"])
    _, policy = await client_start(allowed, "http://127.0.0.1:8000/", server="s")
    assert policy.check("http://127.0.0.1:8000/", navigation=True) is None
    assert policy.check("file:///etc/passwd", navigation=True) is not None
    opened = _runtime(private_network="allow")
    _, policy = await client_start(opened, "http://127.0.0.1:8000/", server="s")
    assert policy.check("file:///etc/passwd", navigation=True) is not None


def test_a_task_file_not_trusted_reaches_its_own_local_server_only() -> None:
    runtime = _runtime()
    policy = data_start(runtime, "http://127.0.0.1:8000/shop")
    assert policy.check("http://127.0.0.1:8000/cart", navigation=True) is None
    for url in ("http://127.0.0.1:8001/", "http://169.254.169.254/latest/", "file:///etc/passwd"):
        assert policy.check(url, navigation=True) is not None, url
    with pytest.raises(InputError, match="not trusted"):
        data_start(runtime, "file:///etc/passwd")
    public = data_start(runtime, "https://example.com/")
    assert public.block_private and public.local_hosts == ()


def test_a_task_sets_server_is_that_one_host_port() -> None:
    policy = task_set_policy(_runtime(), "http://127.0.0.1:9301/miniwob/click-button.html")
    assert policy.check("http://127.0.0.1:9301/miniwob/x.html", navigation=True) is None
    for url in ("file:///etc/passwd", "file:///root/", "http://127.0.0.1:9302/", "http://localhost:9301/"):
        assert policy.check(url, navigation=True) is not None, url
