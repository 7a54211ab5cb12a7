"""Tasks on the ``/hands/`` pages of ``SiteServer``: one per hand the agent has beyond clicks and keys.

Each page (``webagent/testing/data/sites/hands``) needs its hand: a menu that opens only while the pointer rests on
it (a click on its label closes it), a range of documents selected by a click then a shift+click, a
grid cell edited only after a double-click, a file deleted
through the page's own context menu, a card moved between columns by HTML5 drag-and-drop, a slider
dragged with mouse events (its thumb follows the moves), a log panel that scrolls inside a page
that does not, a coupon opened in a second tab and applied on the first (with the coupon tab
closed, in the ``close`` variant). When the real event happens the page reports it to
``/hands/event`` (``SiteServer.hand_events``: the drop handler ran, the value the slider ended at)
and marks its URL (``#marker``), which the scripted validator asks for: a task the agent did not
really do fails. ``steps`` is each task done with its hand, ``without`` the same task tried with the
old hands only (clicks, keys, a page scroll), which must fail.

``SIGNUP`` is a six-field form, the workload of several actions a turn (``plan_script``).
``EXPORT`` is an "Export CSV" button (``export.html``: the file is made in the page, a Blob
downloaded through a link's ``download`` attribute): its task is done only when the download is
kept, since the policy answers from what its observation tells (``export_script``: the answer at
``Downloaded: orders.csv``, another one otherwise); with ``[browser] downloads = "refuse"`` it fails.
Coordinates are CSS pixels of a 1280x800 viewport.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["EXPORT", "EXPORT_CSV", "HAND_TASKS", "SIGNUP", "SIGNUP_PLAN", "HandTask", "export_script", "plan_script"]

Act = dict[str, Any]


def _click(element: str) -> Act:
    return {"action": "click_element", "element": element}


def _answer(content: str) -> Act:
    return {"action": "answer", "content": content}


@dataclass(frozen=True)
class HandTask:
    """A task one of the new hands does (``steps``), which the old ones cannot (``without``)."""

    id: str
    path: str
    goal: str
    elements: dict[str, tuple[int, int]]
    steps: tuple[Act, ...]
    without: tuple[Act, ...]
    marker: str
    answer: str
    event: dict[str, str] = field(default_factory=dict)
    """Fields the page's report of the real event has (``SiteServer.hand_events``)."""

    def url(self, base: str) -> str:
        return f"{base}/hands/{self.path}"

    @property
    def hand(self) -> str:
        """The action the task needs (the one ``without`` lacks)."""
        given = {str(a["action"]) for a in self.steps} - {str(a["action"]) for a in self.without}
        return sorted(given)[0] if given else str(self.steps[0]["action"])

    def script(self, steps: tuple[Act, ...] | None = None) -> dict[str, Any]:
        """An offline model server script: ``steps`` (default: the task's) one a turn, then answers;
        the validator accepts the answer only on the page marked done."""
        return plan_script(self.goal, steps or self.steps, self.elements, marker=self.marker, answer=self.answer)


def plan_script(
    goal: str,
    steps: tuple[Act, ...] | list[Act],
    elements: dict[str, tuple[int, int]],
    *,
    marker: str,
    answer: str,
    per_turn: int = 1,
) -> dict[str, Any]:
    """A script that plays ``steps`` in order, ``per_turn`` of them a turn (several actions a turn when
    above 1; an answer is a turn of its own), then answers ``answer`` at every further step."""
    turns: list[list[Act]] = []
    for act in steps:
        if not turns or len(turns[-1]) >= per_turn or act["action"] == "answer":
            turns.append([])
        turns[-1].append(act)
    policy: list[dict[str, Any]] = [
        {"when": {"step": i}, **({"action": t[0]} if len(t) == 1 else {"actions": t})}
        for i, t in enumerate(turns, start=1)
    ]
    policy.append({"action": _answer(answer)})
    feedback = "The page does not show that the task was done."
    return {
        "elements": {k: list(v) for k, v in elements.items()},
        "tasks": [
            {
                "id": "hands",
                "match": goal,
                "policy": policy,
                "validator": {"accept": [answer], "url": f"#{marker}", "feedback": feedback},
            }
        ],
    }


HAND_TASKS: dict[str, HandTask] = {
    task.id: task
    for task in (
        HandTask(
            id="hover-menu",
            path="hover.html",
            goal="Open Pricing from the Products menu (it opens when the pointer rests on it) and report the plan code",
            elements={"Products menu": (200, 60), "Pricing item of the Products menu": (200, 100)},
            steps=(
                {"action": "hover_element", "element": "Products menu"},
                _click("Pricing item of the Products menu"),
                _answer("HOV-314"),
            ),
            without=(_click("Products menu"), _click("Pricing item of the Products menu"), _answer("HOV-314")),
            marker="hover-pricing",
            answer="HOV-314",
            event={"page": "hover", "item": "pricing"},
        ),
        HandTask(
            id="range-select",
            path="list.html",
            goal="Archive the documents a.txt to d.txt (select the range, then archive it)",
            elements={"a.txt item": (300, 140), "d.txt item": (300, 260), "Archive selected button": (660, 140)},
            steps=(
                _click("a.txt item"),
                {"action": "click_element", "element": "d.txt item", "modifiers": ["shift"]},
                _click("Archive selected button"),
                _answer("archived"),
            ),
            without=(
                _click("a.txt item"),
                _click("d.txt item"),
                _click("Archive selected button"),
                _answer("archived"),
            ),
            marker="archived-a-d",
            answer="archived",
            event={"page": "list", "archived": "a.txt,b.txt,c.txt,d.txt"},
        ),
        HandTask(
            id="grid-cell",
            path="grid.html",
            goal="Set the quantity of Blue Widget to 7 in the stock grid (its cells are edited after a double-click)",
            elements={"Blue Widget quantity cell": (500, 200)},
            steps=(
                {"action": "double_click_element", "element": "Blue Widget quantity cell"},
                {
                    "action": "write_element",
                    "element": "Blue Widget quantity cell",
                    "content": "7",
                    "press_enter": True,
                },
                _answer("saved 7"),
            ),
            without=(
                _click("Blue Widget quantity cell"),
                {
                    "action": "write_element",
                    "element": "Blue Widget quantity cell",
                    "content": "7",
                    "press_enter": True,
                },
                _answer("saved 7"),
            ),
            marker="grid-saved-7",
            answer="saved 7",
            event={"page": "grid", "value": "7", "detail": "2"},
        ),
        HandTask(
            id="context-menu",
            path="files.html",
            goal="Delete report.pdf through its context menu in the shared files",
            elements={"report.pdf row": (300, 150), "Delete item of the context menu": (580, 230)},
            steps=(
                {"action": "right_click_element", "element": "report.pdf row"},
                _click("Delete item of the context menu"),
                _answer("deleted"),
            ),
            without=(_click("report.pdf row"), _click("Delete item of the context menu"), _answer("deleted")),
            marker="deleted-report.pdf",
            answer="deleted",
            event={"page": "files", "deleted": "report.pdf"},
        ),
        HandTask(
            id="board-card",
            path="board.html",
            goal="Move the card Write report to the Done column of the sprint board",
            elements={"Write report card": (250, 181), "Done column": (950, 400)},
            steps=(
                {"action": "drag_element", "element": "Write report card", "target": "Done column"},
                _answer("moved"),
            ),
            without=(_click("Write report card"), _click("Done column"), _answer("moved")),
            marker="write-report-done",
            answer="moved",
            event={"page": "board", "card": "write-report", "column": "done", "types": "text/plain"},
        ),
        HandTask(
            id="slider",
            path="slider.html",
            goal="Set the speaker volume to 80 with the volume slider",
            elements={"volume slider thumb": (360, 300), "the 80 mark of the volume slider": (840, 300)},
            steps=(
                {
                    "action": "drag_element",
                    "element": "volume slider thumb",
                    "target": "the 80 mark of the volume slider",
                },
                _answer("volume 80"),
            ),
            without=(_click("the 80 mark of the volume slider"), _answer("volume 80")),
            marker="volume-80",
            answer="volume 80",
            event={"page": "slider", "value": "80"},
        ),
        HandTask(
            id="log-panel",
            path="panel.html",
            goal="Scroll the build log panel to its end and report the code on its last line",
            elements={"build log panel": (290, 300)},
            steps=(
                *[{"action": "scroll", "direction": "down", "element": "build log panel"}] * 5,
                _answer("PANEL-4711"),
            ),
            without=(*[{"action": "scroll", "direction": "down"}] * 5, _answer("PANEL-4711")),
            marker="panel-end",
            answer="PANEL-4711",
            event={"page": "panel"},
        ),
        HandTask(
            id="coupon-tab",
            path="tabs.html",
            goal="Get your coupon code (it opens in a new tab) and apply it on the checkout page",
            elements={"coupon link": (300, 200), "coupon code field": (250, 280), "Apply button": (480, 280)},
            steps=(
                _click("coupon link"),
                {"action": "switch_tab", "index": 0},
                {"action": "write_element", "element": "coupon code field", "content": "SAVE-2468"},
                _click("Apply button"),
                _answer("applied"),
            ),
            without=(
                _click("coupon link"),
                {"action": "write_element", "element": "coupon code field", "content": "SAVE-2468"},
                _click("Apply button"),
                _answer("applied"),
            ),
            marker="coupon-applied",
            answer="applied",
            event={"page": "tabs", "closed": "false"},
        ),
        HandTask(
            id="coupon-tab-closed",
            path="tabs.html?close=1",
            goal="Get your coupon code (it opens in a new tab), close that tab and apply the code at checkout",
            elements={"coupon link": (300, 200), "coupon code field": (250, 280), "Apply button": (480, 280)},
            steps=(
                _click("coupon link"),
                {"action": "close_tab", "index": 1},
                {"action": "write_element", "element": "coupon code field", "content": "SAVE-2468"},
                _click("Apply button"),
                _answer("applied"),
            ),
            without=(
                _click("coupon link"),
                {"action": "switch_tab", "index": 0},
                {"action": "write_element", "element": "coupon code field", "content": "SAVE-2468"},
                _click("Apply button"),
                _answer("applied"),
            ),
            marker="coupon-applied",
            answer="applied",
            event={"page": "tabs", "closed": "true"},
        ),
    )
}

#: A six-field sign-up form (several actions a turn: ``plan_script(..., per_turn=N)``).
SIGNUP = HandTask(
    id="signup",
    path="signup.html",
    goal="Create an account for Ada Lovelace on the sign-up form",
    elements={
        "First name field": (560, 140),
        "Last name field": (560, 200),
        "Email field": (560, 260),
        "Phone field": (560, 320),
        "City field": (560, 380),
        "ZIP code field": (560, 440),
        "Sign up button": (560, 520),
    },
    steps=(),
    without=(),
    marker="signed-up",
    answer="signed up",
    event={"page": "signup", "first": "Ada", "zip": "NW1 6XE"},
)
#: Filling it in: six fields, the button, the answer.
SIGNUP_PLAN: tuple[Act, ...] = (
    *(
        {"action": "write_element", "element": f"{name} field", "content": value}
        for name, value in (
            ("First name", "Ada"),
            ("Last name", "Lovelace"),
            ("Email", "ada@example.com"),
            ("Phone", "+44 20 7946 0018"),
            ("City", "London"),
            ("ZIP code", "NW1 6XE"),
        )
    ),
    _click("Sign up button"),
    _answer("signed up"),
)

#: An "Export CSV" button whose file only a kept download brings (``export_script``).
EXPORT = HandTask(
    id="csv-export",
    path="export.html",
    goal="Export the orders as a CSV file and report its name",
    elements={"Export CSV button": (800, 145)},
    steps=(_click("Export CSV button"),),
    without=(),
    marker="exported",
    answer="exported orders.csv",
    event={"page": "export", "rows": "3"},
)
#: The file the export makes (the table's three orders).
EXPORT_CSV = b"order,customer,total\n1001,Ada Lovelace,42.50\n1002,Alan Turing,17.25\n1003,Grace Hopper,99.00\n"


def export_script() -> dict[str, Any]:
    """The export task's script: click Export CSV, then answer from what the observation tells: the
    task's answer once it says ``Downloaded: orders.csv``, else that nothing was saved (which the
    validator rejects); the validator accepts only on the page marked exported."""
    script = plan_script(EXPORT.goal, EXPORT.steps, EXPORT.elements, marker=EXPORT.marker, answer=EXPORT.answer)
    policy = script["tasks"][0]["policy"]
    script["tasks"][0]["policy"] = [
        policy[0],
        {"when": {"event": "Downloaded: orders.csv"}, "action": _answer(EXPORT.answer)},
        {"action": _answer("the export was not saved")},
    ]
    return script
