"""The offline server's answers to check and extract requests: recognised by their prompt, judged
from the script's rules and the catalog's page facts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from webagent.prompts import render
from webagent.testing.catalog import page_facts
from webagent.testing.chat import infer_role
from webagent.testing.pagechecks import (
    CHECK_PREFIX,
    EXTRACT_PREFIX,
    CheckRule,
    ExtractRule,
    answer_check,
    answer_extract,
    request_kind,
)
from webagent.testing.script import load_script


def check_text(statement: str, url: str, title: str) -> str:
    return render("check_user.jinja", statement=statement, url=url, title=title)


def extract_text(what: str, url: str, title: str) -> str:
    return render("extract_user.jinja", what=what, url=url, title=title, schema="{}")


def test_the_prefixes_are_how_the_templates_begin() -> None:
    assert check_text("s", "u", "t").startswith(CHECK_PREFIX + " s\n")
    assert extract_text("w", "u", "t").startswith(EXTRACT_PREFIX + " w\n")
    assert request_kind(check_text("s", "u", "t")) == "check"
    assert request_kind(extract_text("w", "u", "t")) == "extract"
    assert request_kind("Task: find the price\nCurrent URL: x") == "run"
    assert infer_role({"response_format": {"json_schema": {"name": "check_verdict"}}}) == "validator"
    assert infer_role({"response_format": {"json_schema": {"name": "extraction"}}}) == "policy"


def test_page_facts_come_from_the_title_the_page_has() -> None:
    assert page_facts("Blue Widget — Widget World") == {"name": "Blue Widget", "price": "$12.50"}
    assert page_facts("Search: gadget — Widget World") == {
        "query": "gadget",
        "results": "Red Gadget, Blue Gadget",
    }
    assert page_facts("No results — Widget World") == {"query": "", "results": ""}
    assert page_facts("Blue Widget") == {}  # not a catalog page
    assert page_facts("Product not found — Widget World") == {}


RULES = [
    CheckRule(match="blue widget at $12.50", url="/catalog/product/", shows="$12.50"),
    CheckRule(match="results", url="/catalog/search", feedback="Not a results page.", holds_feedback="Yes."),
]
PRODUCT = "http://127.0.0.1:9/catalog/product/blue-widget"


def verdict(statement: str, url: str, title: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(answer_check(RULES, check_text(statement, url, title)))
    return data


def test_a_check_holds_when_the_rules_conditions_hold() -> None:
    assert verdict("The page shows the Blue Widget at $12.50", PRODUCT, "Blue Widget — Widget World") == {
        "holds": True,
        "feedback": "The statement holds: it shows the Blue Widget at $12.50.",
    }
    assert verdict("search results are shown", "http://h/catalog/search?q=x", "t") == {
        "holds": True,
        "feedback": "Yes.",
    }


def test_a_check_fails_with_what_the_page_shows_instead() -> None:
    swapped = verdict("The page shows the Blue Widget at $12.50", PRODUCT, "Red Gadget — Widget World")
    assert swapped == {
        "holds": False,
        "feedback": "The statement does not hold on this page: it shows the Red Gadget at $19.99.",
    }
    elsewhere = verdict("The page shows the Blue Widget at $12.50", "http://h/form/", "Register")
    assert elsewhere["feedback"] == "The statement does not hold on this page: it is http://h/form/, titled 'Register'."
    assert verdict("results", "http://h/catalog/", "Widget World")["feedback"] == "Not a results page."
    assert verdict("pigs fly", PRODUCT, "x") == {
        "holds": False,
        "feedback": "No scripted check rule matched this statement.",
    }


def test_extract_rules_answer_json_with_page_facts_or_a_raw_reply() -> None:
    rules = [
        ExtractRule(match="price", url="/catalog/product/", value={"price": "{price}", "n": [1, "{name}"], "x": None}),
        ExtractRule(match="garbage", reply="not JSON"),
    ]
    reply = answer_extract(rules, extract_text("the price", PRODUCT, "Blue Widget — Widget World"))
    assert json.loads(reply) == {"price": "$12.50", "n": [1, "Blue Widget"], "x": None}
    assert answer_extract(rules, extract_text("garbage", PRODUCT, "t")) == "not JSON"
    elsewhere = answer_extract(rules, extract_text("the price", "http://h/form/", "t"))
    assert json.loads(elsewhere) == {"error": "no scripted extract rule matched"}


def test_scripts_take_check_and_extract_rules() -> None:
    script = load_script({"checks": [{"match": "m", "url": "/x"}], "extracts": [{"match": "m", "value": 1}]})
    assert script.checks[0].url == "/x" and script.extracts[0].value == 1
    with pytest.raises(ValueError, match=r"checks\.0\.match: Field required \(\+1 more"):
        load_script({"checks": [{"mtach": "m"}]})
    with pytest.raises(ValidationError):
        CheckRule(match="")
