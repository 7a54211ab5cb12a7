"""``agent.pilot(page)``: act from the page as it is, check, extract and screenshot, in real Chromium
against the local catalog and the offline model server."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from PIL import Image
from playwright.async_api import Frame, Page
from pydantic import BaseModel

from webagent import (
    Agent,
    Budget,
    BudgetExceeded,
    BudgetLimits,
    CheckResult,
    ExtractionError,
    InputError,
    ModelError,
    ReplayCache,
)
from webagent.testing.chat import RecordedRequest
from webagent.testing.sites import SiteServer

from ..conftest import ServerFactory, make_config
from .conftest import pilot_script

pytestmark = pytest.mark.e2e

GOAL = "Find the price of the Blue Widget in the local product catalog and answer with the price."


class Product(BaseModel):
    name: str
    price: str


async def test_act_starts_from_the_page_as_it_is_and_leaves_it_open(
    page: Page, site: SiteServer, model_server: ServerFactory, tmp_path: Path
) -> None:
    await page.goto(f"{site.url}/catalog/search?q=blue+widget")
    navigations: list[str] = []

    def navigated(frame: Frame) -> None:
        if frame == page.main_frame:
            navigations.append(frame.url)

    page.on("framenavigated", navigated)
    before = _handlers(page)
    async with model_server(pilot_script()) as server, Agent(make_config(server)) as agent:
        pilot = agent.pilot(page, output_dir=tmp_path)
        result = await pilot.act(GOAL)
        first = server.requests[0]
    # Step 1 saw the results page the test had opened (the start URL was not opened again) ...
    assert "Current URL: " + f"{site.url}/catalog/search?q=blue+widget" in first.turn
    assert result.success and result.answer == "$12.50" and result.steps == 2
    assert result.url == f"{site.url}/catalog/search?q=blue+widget"
    # ... and the only navigation was the agent's click on the first result.
    assert _handlers(page) == before
    assert navigations == [f"{site.url}/catalog/product/blue-widget"]
    assert not page.is_closed() and page.url.endswith("/catalog/product/blue-widget")
    assert (tmp_path / "act-1" / "report.html").is_file() and result.output_dir == str(tmp_path / "act-1")
    assert pilot.usage.policy.calls == 2 and pilot.usage.validator.calls == 1
    # a page left on about:blank cannot be acted on
    blank = await page.context.new_page()
    async with model_server(pilot_script()) as server, Agent(make_config(server)) as agent:
        with pytest.raises(InputError, match="open a web page first"):
            await agent.pilot(blank).act(GOAL)
        with pytest.raises(InputError, match="no goal given"):
            await agent.pilot(page).act("  ")
        assert server.requests == []


async def test_check_holds_or_fails_with_the_validators_feedback(
    page: Page, site: SiteServer, model_server: ServerFactory, tmp_path: Path
) -> None:
    async with model_server(pilot_script()) as server:
        config = make_config(server)
        config.validator.family = "holo2"  # its requests ask the server not to think
        async with Agent(config) as agent:
            pilot = agent.pilot(page, output_dir=tmp_path)
            await page.goto(f"{site.url}/catalog/product/blue-widget")
            ok = await pilot.check("The page shows the Blue Widget at $12.50")
            await page.goto(f"{site.url}/catalog/product/red-gadget")
            wrong = await pilot.check("The page shows the Blue Widget at $12.50")
            unknown = await pilot.check("The moon is made of cheese")
            requests = list(server.requests)
    assert isinstance(ok, CheckResult) and ok.holds and "$12.50" in ok.feedback
    assert (
        not wrong.holds
        and wrong.feedback == "The statement does not hold on this page: it shows the Red Gadget at $19.99."
    )
    assert not unknown.holds and "No scripted check rule" in unknown.feedback
    # one validator call each, with the current screenshot at the validator's size, URL and title
    assert [(r.role, r.kind) for r in requests] == [("validator", "check")] * 3
    assert (
        requests[0].image_sizes == [[1260, 784]]
        and requests[0].extra["response_format"]["json_schema"]["name"] == "check_verdict"
    )
    assert "Page title: Red Gadget — Widget World" in requests[1].text
    assert all(r.extra.get("chat_template_kwargs") == {"thinking": False} for r in requests)
    assert ok.usage.calls == 1 and ok.usage.prompt_tokens > 0 and pilot.usage.validator.calls == 3
    # each check leaves a one-step run directory with the verdict
    assert ok.run_dir == tmp_path / "check-1" and wrong.run_dir == tmp_path / "check-2"
    result = json.loads((tmp_path / "check-2" / "result.json").read_text())
    assert result["success"] is False and result["feedback"] == [wrong.feedback]
    report = (tmp_path / "check-2" / "report.html").read_text()
    assert "FAIL" in report and "Red Gadget at $19.99" in report
    assert (tmp_path / "check-1" / "step_001.jpg").is_file()


async def test_a_broken_site_fails_the_check_at_the_same_url(page: Page, model_server: ServerFactory) -> None:
    with SiteServer(swap_products={"blue-widget": "red-gadget"}) as broken:
        async with model_server(pilot_script()) as server, Agent(make_config(server)) as agent:
            await page.goto(f"{broken.url}/catalog/product/blue-widget")
            check = await agent.pilot(page).check("The page shows the Blue Widget at $12.50")
            broken.swap_products.clear()  # repaired
            await page.reload()
            fixed = await agent.pilot(page).check("The page shows the Blue Widget at $12.50")
    assert not check.holds and "Red Gadget at $19.99" in check.feedback
    assert fixed.holds


async def test_extract_returns_a_validated_model_or_a_clear_error(
    page: Page, site: SiteServer, model_server: ServerFactory, tmp_path: Path
) -> None:
    await page.goto(f"{site.url}/catalog/product/blue-widget")
    async with model_server(pilot_script()) as server, Agent(make_config(server)) as agent:
        pilot = agent.pilot(page, output_dir=tmp_path)
        product = await pilot.extract("the product's name and price", schema=Product)
        assert product == Product(name="Blue Widget", price="$12.50")
        first = server.requests[-1]
        assert (first.role, first.kind) == ("policy", "extract")
        schema = first.extra["response_format"]["json_schema"]
        assert schema["name"] == "extraction" and schema["strict"] is True
        assert schema["schema"]["required"] == ["name", "price"] and schema["schema"]["additionalProperties"] is False
        server.reset()
        with pytest.raises(ExtractionError, match=r"could not extract 'garbage' as Product: .*after a repair") as err:
            await pilot.extract("garbage", schema=Product)
        assert [r.role for r in server.requests] == ["policy", "policy"]  # the reply, then one repair
        assert err.value.raw == "Sure! It costs twelve fifty."
    answer = json.loads((tmp_path / "extract-1" / "result.json").read_text())["answer"]
    assert json.loads(answer) == {"name": "Blue Widget", "price": "$12.50"}
    failed = json.loads((tmp_path / "extract-2" / "result.json").read_text())
    assert failed["success"] is False and failed["stop_reason"] == "error"


async def test_a_replay_cache_makes_an_unchanged_site_cost_one_validator_call(
    page: Page, site: SiteServer, model_server: ServerFactory, tmp_path: Path
) -> None:
    """The act's steps, the check and the extraction are answered from the cache; the act's answer
    is judged again by the validator (a cache never stands for its acceptance)."""
    cache_file = tmp_path / "pilot.cache.json"

    async def session(server_requests: list[RecordedRequest], runs: Path) -> tuple[bool, bool, Product]:
        async with model_server(pilot_script()) as server, Agent(make_config(server)) as agent:
            await page.goto(f"{site.url}/catalog/")
            pilot = agent.pilot(page, replay=ReplayCache(cache_file), output_dir=runs)
            result = await pilot.act(GOAL)
            check = await pilot.check("The page shows the Blue Widget at $12.50")
            product = await pilot.extract("the product's name and price", schema=Product)
            server_requests.extend(server.requests)
        return result.success, check.holds, product

    first: list[RecordedRequest] = []
    second: list[RecordedRequest] = []
    assert await session(first, tmp_path / "first") == (True, True, Product(name="Blue Widget", price="$12.50"))
    assert len(first) == 3 + 2 + 1 + 1 + 1  # 3 policy, 2 localizer, 1 validator; a check; an extraction
    assert await session(second, tmp_path / "second") == (True, True, Product(name="Blue Widget", price="$12.50"))
    assert [r.role for r in second] == ["validator"]
    # what each run directory says: the act's answer judged now, the check's verdict the cache's
    act = [json.loads(line) for line in (tmp_path / "second" / "act-1" / "trajectory.jsonl").open()]
    assert act[-1]["replayed"] is True and act[-1]["outcome"] == "accepted by the validator"
    assert [c["role"] for c in act[-1]["calls"]] == ["validator"]
    check = json.loads((tmp_path / "second" / "check-1" / "trajectory.jsonl").read_text())
    assert check["outcome"] == "the statement holds (the replay cache's verdict, given on this page state before)"
    data = json.loads(cache_file.read_text())
    assert list(data["checks"]) == [f"act: {GOAL}"]
    check_key, extract_key = sorted(data["answers"])
    assert check_key == "check: The page shows the Blue Widget at $12.50"
    assert extract_key.startswith("extract: the product's name and price [")
    assert data["answers"][extract_key][0]["value"] == {"name": "Blue Widget", "price": "$12.50"}


async def test_screenshot_is_a_png_of_the_viewport(page: Page, site: SiteServer, model_server: ServerFactory) -> None:
    await page.goto(f"{site.url}/catalog/")
    async with model_server(pilot_script()) as server, Agent(make_config(server)) as agent:
        png = await agent.pilot(page).screenshot()
        assert server.requests == []
    assert png.startswith(b"\x89PNG")
    assert Image.open(io.BytesIO(png)).size == (1280, 800)


async def test_budgets_bound_checks_and_extractions(page: Page, site: SiteServer, model_server: ServerFactory) -> None:
    await page.goto(f"{site.url}/catalog/product/blue-widget")
    async with model_server(pilot_script()) as server:
        agent = Agent(make_config(server))
        budget = Budget(BudgetLimits(calls=1), agent.price, scope="test")
        pilot = agent.pilot(page, budgets=[budget])
        assert (await pilot.check("The page shows the Blue Widget at $12.50")).holds
        with pytest.raises(BudgetExceeded):
            await pilot.extract("the product's name and price", schema=Product)
        assert budget.calls == 1 and len(server.requests) == 1
        await agent.aclose()


def _handlers(page: Page) -> dict[str, int]:
    """Event handlers on the page (and its context's "page"): the agent leaves none of its own behind."""
    events = ("dialog", "crash", "download", "framenavigated")
    counts = {e: len(page._impl_obj.listeners(e)) for e in events}
    counts["page"] = len(page.context._impl_obj.listeners("page"))
    return counts


async def test_a_check_whose_model_is_down_raises_and_leaves_its_run_directory(
    page: Page, site: SiteServer, model_server: ServerFactory, tmp_path: Path
) -> None:
    await page.goto(f"{site.url}/catalog/product/blue-widget")
    async with model_server(pilot_script()) as server:
        config = make_config(server)
        config.validator.base_url = f"{server.url}/nowhere/v1"  # 404: the endpoint refuses the request
        async with Agent(config) as agent:
            with pytest.raises(ModelError, match="the validator model"):
                await agent.pilot(page, output_dir=tmp_path).check("The page shows the Blue Widget at $12.50")
    result = json.loads((tmp_path / "check-1" / "result.json").read_text())
    assert result["success"] is False and result["stop_reason"] == "error" and "validator model" in result["message"]
    assert (tmp_path / "check-1" / "report.html").is_file()
