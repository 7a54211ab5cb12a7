"""The plugin in async tests: pytest-playwright-asyncio's page, ``await web.act(...)``."""

from __future__ import annotations

import pytest

from .conftest import GOAL, STATEMENT, Project, asyncio_plugin_installed, calls

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ASYNC_CHECKOUT = f"""
import pytest
from pydantic import BaseModel

from webagent.pytest_plugin import AsyncWeb


class Product(BaseModel):
    name: str
    price: str


@pytest.mark.asyncio(loop_scope="session")
async def test_checkout(web, page, shop):
    assert isinstance(web, AsyncWeb)
    await page.goto(f"{{shop}}/catalog/")
    result = await web.act({GOAL!r})
    assert result.answer == "$12.50"
    await web.check({STATEMENT!r})
    assert await web.extract("the product's name and price", schema=Product) == Product(
        name="Blue Widget", price="$12.50"
    )
    assert (await web.screenshot()).startswith(b"\\x89PNG")


@pytest.mark.asyncio(loop_scope="session")
async def test_a_wrong_statement_fails(web, page, shop):
    await page.goto(f"{{shop}}/catalog/product/red-gadget")
    await web.check({STATEMENT!r})
"""


def test_an_async_test_drives_pytest_playwright_asyncios_page(project: Project) -> None:
    assert asyncio_plugin_installed(), "pytest-playwright-asyncio is missing: pip install -e '.[test]'"
    project.write("test_async_shop.py", ASYNC_CHECKOUT)
    result = project.run(variant="asyncio")
    result.assert_outcomes(passed=1, failed=1)
    assert "webagent: pytest-playwright-asyncio (async tests)" in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            f"E * AssertionError: web.check failed: {STATEMENT!r}",
            "E * validator: The statement does not hold on this page: it shows the Red Gadget at $19.99.",
            "E * report: test-results/test-async-shop-py-test-a-wrong-statement-fails-chromium/webagent/check-1/report.html",
        ]
    )
    assert calls(project.server) == 9  # the checkout's 8 and the failing check
