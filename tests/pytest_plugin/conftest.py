"""Running generated pytest projects that use the plugin, in subprocesses (``pytester``).

Each run is a real ``python -m pytest`` in a temporary directory with a ``pytest.ini``, a
``webagent.toml`` pointing the three roles at the offline model server, and a ``conftest.py``
whose ``shop`` fixture is the URL of the local catalog. The model server and the sites serve from
threads of this process, so their request counts are read here after the run.

Sync pytest-playwright tests cannot run in this process: a sync Playwright marks its event loop as
running in the main thread, and the suite's async tests could not run after it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from webagent.testing.offline import PROFILE_MODELS
from webagent.testing.server import FakeModelServer
from webagent.testing.sites import SiteServer, data_dir

#: The catalog task with check and extract rules, the script docs/pytest.md runs the fake server with.
SCRIPT = data_dir() / "scripts" / "catalog-price.json"

GOAL = "Find the price of the Blue Widget in the local product catalog and answer with the price."
STATEMENT = "The page shows the Blue Widget at $12.50"
RUN_TIMEOUT_S = 180.0


def plugin_args() -> list[str]:
    """``-p webagent.pytest_plugin`` unless the installed package's entry point loads it already
    (loading it twice is an error): the worktree's own code under test either way."""
    entry = next(
        (ep for ep in importlib.metadata.entry_points(group="pytest11") if ep.name == "webagent"),
        None,
    )
    if entry is not None and entry.value == "webagent.pytest_plugin":
        return []
    return ["-p", "webagent.pytest_plugin"]


def asyncio_plugin_installed() -> bool:
    return importlib.util.find_spec("pytest_playwright_asyncio") is not None


@pytest.fixture(scope="module")
def offline() -> Iterator[FakeModelServer]:
    """The offline model server playing the catalog task and its checks and extractions (a thread)."""
    server = FakeModelServer(SCRIPT)
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop_thread()


def calls(server: FakeModelServer) -> int:
    """Chat requests the server answered since its last reset, all roles."""
    return sum(server.request_counts.values())


class Project:
    """A generated pytest project using webagent's plugin, and how to run it."""

    def __init__(self, pytester: pytest.Pytester, server: FakeModelServer, shop: str) -> None:
        self.pytester = pytester
        self.server = server
        self.path = pytester.path
        model = PROFILE_MODELS["holo1.5"]
        roles = "\n".join(
            f'[{role}]\nbase_url = "{server.url}/{role}/v1"\nmodel = "{model}"\napi_key = "offline"\ntimeout_s = 10\n'
            for role in ("policy", "localizer", "validator")
        )
        pytester.makefile(".toml", webagent=roles)
        pytester.makeini(
            """
            [pytest]
            webagent_config = webagent.toml
            asyncio_default_fixture_loop_scope = session
            asyncio_default_test_loop_scope = session
            """
        )
        self.set_shop(shop)

    def set_shop(self, url: str) -> None:
        self.pytester.makeconftest(
            f"""
            import pytest

            @pytest.fixture(scope="session")
            def shop():
                return {url!r}
            """
        )

    def write(self, name: str, source: str) -> Path:
        path = self.path / name
        path.write_text(textwrap.dedent(source), encoding="utf-8")
        return path

    def run(self, *args: str, variant: str = "sync") -> pytest.RunResult:
        """Run pytest there with pytest-playwright (``sync``) or pytest-playwright-asyncio (``asyncio``)."""
        blocked = "playwright-asyncio" if variant == "sync" else "playwright"
        self.server.reset()
        return self.pytester.runpytest_subprocess(
            *plugin_args(), "-p", f"no:{blocked}", "-p", "no:cacheprovider", *args, timeout=RUN_TIMEOUT_S
        )


@pytest.fixture
def project(pytester: pytest.Pytester, offline: FakeModelServer, site: SiteServer) -> Project:
    return Project(pytester, offline, site.url)
