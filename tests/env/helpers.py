"""Plans for MiniWoB++ pages a test cannot reach (a server's): the same task and seed opened in the
test's own browser at the same viewport give the same layout, so the same points."""

from __future__ import annotations

from typing import Any

from playwright.async_api import Browser

from webagent.tasks import benchmark_task
from webagent.testing.miniwob import PLAN


async def plan_for(
    browser: Browser, name: str, seed: int, viewport: tuple[int, int], plan: str = PLAN
) -> list[dict[str, Any]]:
    """The scripted plan of ``name`` with ``seed`` (points in CSS pixels: ``at_image`` scales them)."""
    task = benchmark_task(name, seed)
    context = await browser.new_context(viewport={"width": viewport[0], "height": viewport[1]})
    try:
        page = await context.new_page()
        await page.goto(task.url)
        await task.start(page)  # type: ignore[arg-type]  (a Playwright page has what start needs)
        planned: list[dict[str, Any]] = await page.evaluate(plan)
    finally:
        await context.close()
    return planned


def at_image(action: dict[str, Any], viewport: tuple[int, int], image_size: tuple[int, int]) -> tuple[float, float]:
    """A planned action's point in pixels of a screenshot of ``image_size``."""
    return action["x"] * image_size[0] / viewport[0], action["y"] * image_size[1] / viewport[1]
