"""Fake-model scripts and suites for ``TeamSite`` (``webagent.testing.teamsite``): signing in with a
password and a 2FA code, and a suite of checks on the signed-in pages.

The sign-in is what a policy does on the site: the user name, then ``{{PASSWORD}}`` (Enter), then
the 2FA code -- ``{{OTP}}`` from the secrets, or asked of a person with ``ask_user`` when
``ask_code`` is set -- and then the task. A run that starts signed in (a saved storage state) is
sent straight to the page and answers at its first step.
"""

from __future__ import annotations

from typing import Any

from .teamsite import ITEMS, USER, item_status

__all__ = ["SIGN_IN_ELEMENTS", "SIGN_IN_GOAL", "item_goal", "item_suite", "sign_in_rules", "team_script"]

SIGN_IN_GOAL = "Sign in to the team site as ada, then say you are signed in"
SIGN_IN_ELEMENTS: dict[str, list[int]] = {
    "user field": [400, 200],
    "password field": [400, 280],
    "code field": [400, 200],
}


def sign_in_rules(*, ask_code: bool = False) -> list[dict[str, Any]]:
    """The policy's sign-in steps on ``/login`` and ``/2fa``."""
    code: list[dict[str, Any]] = [
        {
            "when": {"url": "/2fa"},
            "action": {"action": "write_element", "element": "code field", "content": "{{OTP}}", "press_enter": True},
        }
    ]
    if ask_code:
        code = [
            {
                "when": {"url": "/2fa", "last_action": "ask_user"},
                "action": {
                    "action": "write_element",
                    "element": "code field",
                    "content": "424242",
                    "press_enter": True,
                },
            },
            {
                "when": {"url": "/2fa"},
                "action": {"action": "ask_user", "question": "What is the 6-digit code from the authenticator app?"},
            },
        ]
    return [
        {
            "when": {"url": "/login", "step": 1},
            "action": {"action": "write_element", "element": "user field", "content": USER},
        },
        {
            "when": {"url": "/login"},
            "action": {
                "action": "write_element",
                "element": "password field",
                "content": "{{PASSWORD}}",
                "press_enter": True,
            },
        },
        *code,
    ]


def item_goal(n: int) -> str:
    return f"Report the status of item {n} on the team site"


def team_script(items: int = ITEMS, *, ask_code: bool = False) -> dict[str, Any]:
    """One task for signing in (``SIGN_IN_GOAL``) and one per item (``item_goal``), each signing in
    first when sent to the login page."""
    sign_in = sign_in_rules(ask_code=ask_code)
    tasks: list[dict[str, Any]] = [
        {
            "id": "sign-in",
            "match": "Sign in to the team site",
            "policy": [{"when": {"url": "/app/"}, "action": {"action": "answer", "content": "signed in"}}, *sign_in],
            "validator": {"accept": ["signed in"], "url": "/app/"},
        }
    ]
    for n in range(1, items + 1):
        status = item_status(n)
        tasks.append(
            {
                "id": f"item-{n}",
                "match": f"status of item {n} on",
                "policy": [
                    {
                        "when": {"url": f"/app/item/{n}"},
                        "action": {"action": "answer", "content": f"Item {n} is {status}"},
                    },
                    *sign_in,
                ],
                "validator": {"accept": [status], "url": f"/app/item/{n}"},
            }
        )
    return {"elements": SIGN_IN_ELEMENTS, "tasks": tasks}


def item_suite(site_url: str, items: int = ITEMS) -> list[dict[str, Any]]:
    """A suite's checks (JSONL lines): one per item page."""
    return [{"name": f"item-{n}", "url": f"{site_url}/app/item/{n}", "goal": item_goal(n)} for n in range(1, items + 1)]
