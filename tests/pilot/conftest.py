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
    """The bundled catalog-price script: the task (for ``act``), its check and extract rules, and
    an extract rule whose reply is no JSON at all."""
    script = load_task_script("catalog-price")
    assert script["checks"] and script["extracts"]  # bundled: the docs' examples run on them
    script["extracts"].append({"match": "garbage", "reply": "Sure! It costs twelve fifty."})
    return script
