"""Scripted answers of the offline model server to ``Pilot.check`` and ``Pilot.extract`` requests.

The server recognises them by their prompt, as it recognises repairs: a check's user message
begins with ``Statement to check:`` (``prompts/check_user.jinja``, sent to the validator's
endpoint), an extraction's with ``Data to extract:`` (``prompts/extract_user.jinja``, sent to the
policy's). Both carry ``Current URL:`` and ``Page title:`` lines, which is what a rule can look
at, with the **page facts** the bundled catalog exposes (``page_facts``): on a product page
``name`` and ``price`` (``Blue Widget``, ``$12.50``), on a search page ``query`` and ``results``
(the product names found, comma-separated), read from the title the page really has.

A script lists its rules at the top level::

    "checks": [
      {"match": "Blue Widget at $12.50", "url": "/catalog/product/", "shows": "$12.50",
       "feedback": "The product page does not show the Blue Widget at $12.50."}
    ],
    "extracts": [
      {"match": "price", "url": "/catalog/product/", "value": {"name": "{name}", "price": "{price}"}},
      {"match": "garbage", "reply": "this is not JSON"}
    ]

**Check rules.** The first rule whose ``match`` occurs in the statement (case-insensitively)
judges it: the statement holds when each condition given holds -- ``url`` (a substring of the
current URL), ``title`` (of the page title), ``shows`` (of the page facts, e.g. a price). The
feedback is ``feedback`` when it does not hold (by default a sentence saying what the page shows
instead: its facts, or its URL and title) and ``holds_feedback`` when it does (by default a short
confirmation). A statement no rule matches does not hold (``No scripted check rule matched``).

**Extract rules.** The first rule whose ``match`` occurs in what is asked for and whose ``url``,
``title`` and ``shows`` conditions hold answers: ``value`` as JSON, each ``{name}`` in its strings
replaced by the page fact of that name; or ``reply``, sent as it is (to test a reply that does not
validate). No rule: ``{"error": "no scripted extract rule matched"}``.

**Breaking a site.** A check fails when the page is not what the statement says: another URL (a
test that opens the wrong page), or the same URL showing something else --
``SiteServer(swap_products={"blue-widget": "red-gadget"})`` serves the Red Gadget's page at the
Blue Widget's URL, whose title, and so facts, then say ``Red Gadget``, ``$19.99``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .catalog import page_facts

__all__ = [
    "CHECK_PREFIX",
    "EXTRACT_PREFIX",
    "CheckRule",
    "ExtractRule",
    "PageSeen",
    "RequestKind",
    "answer_check",
    "answer_extract",
    "request_kind",
]

#: How ``prompts/check_user.jinja`` and ``prompts/extract_user.jinja`` begin.
CHECK_PREFIX = "Statement to check:"
EXTRACT_PREFIX = "Data to extract:"
NO_EXTRACT_RULE = json.dumps({"error": "no scripted extract rule matched"})

RequestKind = Literal["run", "check", "extract"]
_LINE = {
    name: re.compile(rf"^{re.escape(label)} ?(.*)$", re.M)
    for name, label in (
        ("statement", CHECK_PREFIX),
        ("what", EXTRACT_PREFIX),
        ("url", "Current URL:"),
        ("title", "Page title:"),
    )
}


def request_kind(text: str) -> RequestKind:
    """Whether a request's first user message is a check's, an extraction's, or a run's."""
    start = text.lstrip()
    return "check" if start.startswith(CHECK_PREFIX) else "extract" if start.startswith(EXTRACT_PREFIX) else "run"


class PageSeen(BaseModel):
    """What a check or extraction request says: the statement or what to extract, URL, title."""

    subject: str = ""
    url: str = ""
    title: str = ""

    @classmethod
    def parse(cls, text: str) -> PageSeen:
        found = {name: (m.group(1).strip() if (m := rx.search(text)) else "") for name, rx in _LINE.items()}
        return cls(subject=found["statement"] or found["what"], url=found["url"], title=found["title"])

    @property
    def facts(self) -> dict[str, str]:
        return page_facts(self.title)

    def describe(self) -> str:
        """What the page shows, in words (its facts, else its URL and title)."""
        facts = self.facts
        if "price" in facts:
            return f"it shows the {facts['name']} at {facts['price']}"
        if "query" in facts:
            return f"it shows the search results for {facts['query']!r}: {facts['results'] or 'none'}"
        return f"it is {self.url or 'an unknown URL'}, titled {self.title!r}"


class _PageRule(BaseModel):
    model_config = ConfigDict(extra="forbid")

    match: str = Field(min_length=1, description="A substring (any case) of the statement or of what is asked")
    url: str | None = Field(default=None, description="A substring of the current URL")
    title: str | None = Field(default=None, description="A substring of the page title")
    shows: str | None = Field(default=None, description="A substring of the page facts' values")

    def matches(self, seen: PageSeen) -> bool:
        return self.match.lower() in seen.subject.lower()

    def page_ok(self, seen: PageSeen) -> bool:
        shown = " ".join(seen.facts.values())
        return all(
            (
                self.url is None or self.url in seen.url,
                self.title is None or self.title in seen.title,
                self.shows is None or self.shows in shown,
            )
        )


class CheckRule(_PageRule):
    """How the scripted validator judges a statement about the current page."""

    feedback: str | None = None
    holds_feedback: str | None = None


class ExtractRule(_PageRule):
    """What the scripted policy answers to an extraction."""

    value: Any = None
    reply: str | None = None

    def answer(self, seen: PageSeen) -> str:
        if self.reply is not None:
            return self.reply
        return json.dumps(_fill(self.value, seen.facts))


def answer_check(rules: list[CheckRule], text: str) -> str:
    """The scripted verdict (``{"holds", "feedback"}`` JSON) on a check request's text."""
    seen = PageSeen.parse(text)
    rule = next((r for r in rules if r.matches(seen)), None)
    if rule is None:
        return json.dumps({"holds": False, "feedback": "No scripted check rule matched this statement."})
    if rule.page_ok(seen):
        return json.dumps(
            {"holds": True, "feedback": rule.holds_feedback or f"The statement holds: {seen.describe()}."}
        )
    feedback = rule.feedback or f"The statement does not hold on this page: {seen.describe()}."
    return json.dumps({"holds": False, "feedback": feedback})


def answer_extract(rules: list[ExtractRule], text: str) -> str:
    """The scripted reply to an extraction request's text."""
    seen = PageSeen.parse(text)
    rule = next((r for r in rules if r.matches(seen) and r.page_ok(seen)), None)
    return rule.answer(seen) if rule is not None else NO_EXTRACT_RULE


def _fill(value: Any, facts: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, fact in facts.items():
            value = value.replace("{" + name + "}", fact)
        return value
    if isinstance(value, list):
        return [_fill(v, facts) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, facts) for k, v in value.items()}
    return value
