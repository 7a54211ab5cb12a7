"""The plugin under pytest-xdist: each worker writes its tests' cache files, and the session's
budget counts the calls of all the workers together (its exactness across processes is
tests/pytest_plugin/test_parts.py's)."""

from __future__ import annotations

import json

import pytest

from .conftest import GOAL, STATEMENT, Project, calls

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

TESTS = f"""
import pytest


def test_checkout(web, page, shop):
    page.goto(f"{{shop}}/catalog/")
    web.act({GOAL!r})


@pytest.mark.parametrize("product", ["blue-widget", "blue-widget-xl"])
def test_product_page(web, page, shop, product):
    page.goto(f"{{shop}}/catalog/product/blue-widget")
    web.check({STATEMENT!r})
"""


def test_two_workers_write_their_own_cache_files_and_share_the_session_budget(project: Project) -> None:
    project.write("test_parallel.py", TESTS)
    result = project.run("-n", "2", "-v", "--webagent-max-calls-per-session=50")
    result.assert_outcomes(passed=3)
    for worker in ("gw0", "gw1"):  # both workers ran tests
        assert any(line.startswith(f"[{worker}]") and "PASSED" in line for line in result.outlines), worker
    files = sorted(p.name for p in (project.path / "__webagent_cache__" / "test_parallel").iterdir())
    assert files == [
        "test_checkout[chromium].json",
        "test_product_page[chromium-blue-widget-xl].json",
        "test_product_page[chromium-blue-widget].json",
    ]
    for name in files:  # whole, valid files
        json.loads((project.path / "__webagent_cache__" / "test_parallel" / name).read_text())
    # the budget file both workers counted in: every call the server answered
    budget = project.path / "runpytest-0" / "webagent-session-budget.json"  # --basetemp of the run
    counted = json.loads(budget.read_text())
    assert counted["calls"] == calls(project.server) == 8 and counted["in_flight"] == 0
