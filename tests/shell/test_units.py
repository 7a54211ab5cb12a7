"""The shell's parts without a browser: errors to exit codes, refs, the changed area, the challenge
heuristic, the request model."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image
from pydantic import ValidationError

from webagent.errors import (
    BrowserCrashError,
    BrowserError,
    BrowserStuckError,
    InputError,
    ModelUnavailableError,
    NavigationError,
)
from webagent.shell.daemon import error_reply
from webagent.shell.protocol import Request, ShellError
from webagent.shell.receipts import changed_area, looks_like_challenge
from webagent.shell.refs import Control, RefKey, RefTable, parse_ref
from webagent.shell.snapdiff import diff_rows


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (ShellError(4, "stale ref @e3"), 4),
        (BrowserCrashError("the page is gone"), 6),
        (NavigationError("refused by the policy"), 2),
        (InputError("bad URL"), 2),
        (BrowserStuckError("the browser is stuck"), 4),
        (TimeoutError(), 4),
        (BrowserError("the page did not answer a script: 10 s"), 4),
        (BrowserError("the page could not run a script: boom"), 2),
        (ModelUnavailableError("no model server"), 2),
        (RuntimeError("a bug\nwith lines"), 2),
    ],
)
def test_every_error_is_one_line_with_its_exit_code(exc: BaseException, code: int) -> None:
    reply = error_reply(exc)
    assert reply.code == code and "\n" not in reply.text and reply.data["error"] == reply.text


def control(role: str, name: str) -> Control:
    return Control(role=role, name=name, x=1, y=1, w=1, h=1)


def test_refs_name_a_control_by_role_name_and_rank() -> None:
    table = RefTable()
    table.renumber([control("button", "Add"), control("link", "Help"), control("button", "Add")])
    assert table.key("@e1") == RefKey("button", "Add", 0, 0, False)
    assert table.key("e3") == RefKey("button", "Add", 1, 1, False)
    # One read in a frame of another origin: its rank in the page, and in that frame's own read.
    table.renumber([control("button", "Add"), control("button", "Add")], [(False, 0), (True, 0)])
    assert table.key("@e2") == RefKey("button", "Add", 1, 0, True)
    with pytest.raises(ShellError) as unknown:
        table.key("@e4")
    assert unknown.value.code == 2
    with pytest.raises(ShellError) as malformed:
        parse_ref("@x1")
    assert malformed.value.code == 2


def png(color: tuple[int, int, int], box: tuple[int, int, int, int] | None = None) -> bytes:
    image = Image.new("RGB", (100, 50), (255, 255, 255))
    if box is not None:
        image.paste(color, box)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def test_the_changed_area_is_its_share_and_box() -> None:
    assert changed_area(png((0, 0, 0)), png((0, 0, 0))) == (0.0, None)
    share, box = changed_area(png((0, 0, 0)), png((0, 0, 0), (10, 20, 30, 30)))
    assert box == (10, 20, 20, 10) and share == pytest.approx(200 / 5000)


def test_a_challenge_page_is_recognised() -> None:
    assert looks_like_challenge("Just a moment...", "")
    assert looks_like_challenge("Shop", "Please verify you are human to continue")
    assert not looks_like_challenge("Items", "Apple 3")


def test_a_request_with_unknown_fields_is_refused() -> None:
    with pytest.raises(ValidationError):
        Request.model_validate({"command": "snap", "evil": 1})


def test_snap_diff_tells_added_removed_and_changed_controls_by_role_name_and_rank() -> None:
    def row(ref: int, role: str, name: str, value: str | None = None) -> dict[str, Any]:
        return {"ref": f"@e{ref}", "role": role, "name": name, "value": value, "x": 0, "y": 0}

    before = [row(1, "textbox", "Name", ""), row(2, "button", "Edit"), row(3, "button", "Edit"), row(4, "link", "Help")]
    after = [
        row(1, "textbox", "Name", "Ada"),
        row(2, "button", "Edit"),
        row(3, "link", "Help"),
        row(4, "button", "Save"),
    ]
    changes, text = diff_rows(before, after)
    assert [r["ref"] for r in changes["added"]] == ["@e4"]
    assert changes["removed"] == [{"role": "button", "name": "Edit", "value": None}]  # the second Edit
    assert [(r["ref"], r["was"], r["value"]) for r in changes["changed"]] == [("@e1", "", "Ada")]
    assert changes["same"] == 2
    assert text.splitlines() == [
        '+ @e4 button "Save"',
        '- button "Edit"',
        "~ @e1 textbox \"Name\" = 'Ada' (was '')",
        "2 control(s) as before",
    ]
    first, _ = diff_rows(None, after)
    assert len(first["added"]) == 4 and first["same"] == 0
    none, text = diff_rows(after, after)
    assert none["added"] == none["removed"] == none["changed"] == [] and text.startswith("no change")
