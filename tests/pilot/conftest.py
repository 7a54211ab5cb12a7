"""Fixtures of the pilot tests: a page of its own in the shared Chromium, and the pilot script."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, Page

from ..conftest import load_task_script


@pytest.fixture
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await context.new_page()
    yield page
    await context.close()


def pilot_script() -> dict[str, Any]:
    """The catalog-price task (for ``act``) with check and extract rules."""
    script = load_task_script("catalog-price")
    script["checks"] = [
        {"match": "Blue Widget at $12.50", "url": "/catalog/product/", "shows": "$12.50"},
        {"match": "search results", "url": "/catalog/search", "feedback": "This is not a results page."},
    ]
    script["extracts"] = [
        {"match": "product", "url": "/catalog/product/", "value": {"name": "{name}", "price": "{price}"}},
        {"match": "garbage", "reply": "Sure! It costs twelve fifty."},
    ]
    return script
