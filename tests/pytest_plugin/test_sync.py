"""The plugin end to end in sync tests: generated projects run by pytest with pytest-playwright, the
local catalog and the offline model server."""

from __future__ import annotations

import json

import pytest

from webagent.testing.sites import SiteServer

from .conftest import GOAL, STATEMENT, Project, calls

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

CHECKOUT = f"""
from pydantic import BaseModel

GOAL = {GOAL!r}


class Product(BaseModel):
    name: str
    price: str


def test_checkout(web, page, shop):
    page.goto(f"{{shop}}/catalog/")
    result = web.act(GOAL)
    assert result.success and result.answer == "$12.50"
    web.check({STATEMENT!r})
    product = web.extract("the product's name and price", schema=Product)
    assert product == Product(name="Blue Widget", price="$12.50")
    # the test's own page is still the sync API's, and on the page the agent left
    page.mouse.click(5, 5)
    assert page.context.pages == [page]
    assert page.url.endswith("/catalog/product/blue-widget") and "Blue Widget" in page.title()
"""


def test_act_check_extract_pass_then_replay_with_only_the_validator_judging_the_answer(project: Project) -> None:
    project.write("test_shop.py", CHECKOUT)
    first = project.run()
    first.assert_outcomes(passed=1)
    assert project.server.request_counts == {"policy": 4, "localizer": 2, "validator": 2}
    assert "webagent: pytest-playwright (sync tests), cache auto" in first.stdout.str()
    # one cache file for the test, next to it: the act's steps, the check's and extraction's answers
    cache = project.path / "__webagent_cache__" / "test_shop" / "test_checkout[chromium].json"
    data = json.loads(cache.read_text())
    assert list(data["checks"]) == [f"act: {GOAL}"] and len(data["checks"][f"act: {GOAL}"]["steps"]) == 3
    check, extract = sorted(data["answers"])
    assert check == f"check: {STATEMENT}" and extract.startswith("extract: the product's name and price [")
    # a passing test keeps no run folders (--webagent-runs retain-on-failure)
    assert not list(project.path.glob("test-results/*/webagent"))
    # the site did not change: the second run replays every step and answer, the validator judging the
    # act's answer again (one call: a cache never stands for its acceptance), and leaves the cache as it was
    second = project.run()
    second.assert_outcomes(passed=1)
    assert calls(project.server) == 1 and project.server.request_counts.get("validator") == 1
    assert json.loads(cache.read_text()) == data


def test_the_same_goal_twice_keeps_two_recordings_and_replays_both(project: Project) -> None:
    project.write(
        "test_twice.py",
        f"""
        def test_price_twice(web, page, shop):
            page.goto(f"{{shop}}/catalog/")
            assert web.act({GOAL!r}).answer == "$12.50"  # searches, opens the product, answers
            page.goto(f"{{shop}}/catalog/product/blue-widget")
            assert web.act({GOAL!r}).answer == "$12.50"  # answers at once: another recording
        """,
    )
    project.run().assert_outcomes(passed=1)
    assert calls(project.server) > 0
    cache = project.path / "__webagent_cache__" / "test_twice" / "test_price_twice[chromium].json"
    recordings = json.loads(cache.read_text())["checks"]
    assert {key: len(rec["steps"]) for key, rec in recordings.items()} == {f"act: {GOAL}": 3, f"act#2: {GOAL}": 1}
    project.run().assert_outcomes(passed=1)
    assert calls(project.server) == 2  # the validator, judging each act's replayed answer


def test_a_broken_site_fails_with_the_validators_feedback_and_the_report(project: Project) -> None:
    project.write(
        "test_broken.py",
        f"""
        def test_product_page(web, page, shop):
            page.goto(f"{{shop}}/catalog/product/blue-widget")
            web.check({STATEMENT!r})


        def test_act_runs_out_of_steps(web, page, shop):
            page.goto(f"{{shop}}/catalog/")
            web.act({GOAL!r})
        """,
    )
    with SiteServer(swap_products={"blue-widget": "red-gadget"}) as broken:
        project.set_shop(broken.url)
        result = project.run("--webagent-max-steps=1", "--tracing=retain-on-failure")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    folder = "test-results/test-broken-py-test-product-page-chromium/webagent"
    result.stdout.fnmatch_lines(
        [
            f"E * AssertionError: web.check failed: {STATEMENT!r}",
            "E * validator: The statement does not hold on this page: it shows the Red Gadget at $19.99.",
            f"E * report: {folder}/check-1/report.html",
            "E * AssertionError: web.act did not reach its goal*",
            "E * report: test-results/test-broken-py-test-act-runs-out-of-steps-chromium/webagent/act-1/report.html",
        ]
    )
    assert "webagent reports of failed tests" in out
    report = project.path / folder / "check-1" / "report.html"
    assert "Red Gadget at $19.99" in report.read_text()
    assert (project.path / folder).parent.joinpath("trace.zip").is_file()  # pytest-playwright's, beside ours
    act = project.path / "test-results/test-broken-py-test-act-runs-out-of-steps-chromium/webagent/act-1"
    assert (act / "report.html").is_file() and (act / "trajectory.jsonl").is_file()
    assert json.loads((act / "result.json").read_text())["stop_reason"] == "max_steps"
    # a check that failed is not kept in the cache
    cache = project.path / "__webagent_cache__" / "test_broken" / "test_product_page[chromium].json"
    assert not cache.exists() or "answers" not in json.loads(cache.read_text())


def test_a_test_budget_stops_the_agent_and_says_which_option_raises_it(project: Project) -> None:
    project.write("test_shop.py", CHECKOUT)
    result = project.run("--webagent-max-calls-per-test=2", "--webagent-cache=off")
    result.assert_outcomes(failed=1)
    assert calls(project.server) == 2
    result.stdout.fnmatch_lines(["E * stopped: budget (*raise --webagent-max-calls-per-test to allow more*"])
    assert not (project.path / "__webagent_cache__").exists()
