"""Each action command through ``subprocess``, as a shell runs it, with receipts checked against what the
page really saw: the local pages report each event to the site server (``SiteServer.hand_events``).
Upload, select, key, dialogs (alert, confirm, prompt: accepted, and told), drag, double-click, right-click,
scroll of a panel by its ref and of the page, and a bot challenge (exit 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from webagent.testing.sites import SiteServer

from .conftest import Shell, seen

pytestmark = pytest.mark.e2e


def start(shell: Shell, url: str, *flags: str) -> None:
    done = shell("session", "start", "--url", url, *shell.flags(), *flags)
    assert done.returncode == 0, done.stderr


def ref(shell: Shell, query: str) -> dict[str, Any]:
    code, found = shell.json("find", query)
    assert code == 0 and len(found["matches"]) == 1, found
    match: dict[str, Any] = found["matches"][0]
    return match


def test_upload_select_key_and_dialogs(shell: Shell, site: SiteServer, tmp_path: Path) -> None:
    uploads = tmp_path / "uploads"
    uploads.mkdir()
    (uploads / "notes.txt").write_text("three pears\n")
    start(shell, f"{site.url}/shell/form.html", "--upload-dir", str(uploads))
    code, first = shell.json("snap", "--diff")  # no snap before: every control is new
    assert code == 0 and [r["name"] for r in first["added"]][:2] == ["Attachment", "Fruit"], first

    code, receipt = shell.json("upload", ref(shell, "Attachment")["ref"], "notes.txt")
    assert code == 0 and receipt["action"] == "upload_file" and receipt["changed"] > 0, receipt
    assert seen(site, "upload") == [{"page": "upload", "name": "notes.txt", "size": "12", "text": "three pears\n"}]
    refused = shell("session", "upload", ref(shell, "Attachment")["ref"], "../notes.txt")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused
    assert len(seen(site, "upload")) == 1

    code, receipt = shell.json("select", ref(shell, "Fruit")["ref"], "Pear")
    assert code == 0 and receipt["value"] == "Pear" and "Pear" in receipt["outcome"], receipt
    assert seen(site, "select") == [{"page": "select", "value": "Pear"}]
    # Only what changed since the last snap: the select's value.
    code, changes = shell.json("snap", "--diff")
    assert code == 0 and changes["added"] == [] and changes["removed"] == [], changes
    assert [(c["name"], c["was"], c["value"]) for c in changes["changed"]] == [("Fruit", "Apple", "Pear")]
    again = shell("session", "snap", "--diff")
    assert again.returncode == 0 and again.stdout.startswith("no change since the last snap"), again

    code, receipt = shell.json("key", "Escape")
    assert code == 0 and receipt["action"] == "press_key" and receipt["changed"] > 0, receipt
    assert seen(site, "key") == [{"page": "key", "key": "Escape", "shift": "false"}]
    plain = shell("session", "key", "Shift+K")
    assert plain.returncode == 0 and plain.stdout.startswith("press_key"), plain
    assert seen(site, "key")[-1]["key"] == "K" and seen(site, "key")[-1]["shift"] == "true"

    # Dialogs are accepted (a prompt with its default answer); the receipt tells each, with its message.
    answers = {"alert": "returned", "confirm": "true", "prompt": "Ada"}
    messages = {"alert": "Saved the draft", "confirm": "Delete the draft?", "prompt": "Your name?"}
    for kind in ("alert", "confirm", "prompt"):
        code, receipt = shell.json("click", ref(shell, f"button {kind}")["ref"])
        assert code == 0, receipt
        told = [e for e in receipt["events"] if f"{kind} dialog" in e]
        assert len(told) == 1 and messages[kind] in told[0] and "accepted" in told[0], receipt
        reported = [e for e in seen(site, "dialog") if e["kind"] == kind]
        assert len(reported) == 1 and reported[0].get("answer", reported[0].get("after")) == answers[kind]
    plain = shell("session", "click", ref(shell, "button confirm")["ref"])
    assert plain.returncode == 0 and "Delete the draft?" in plain.stdout and "accepted" in plain.stdout, plain


def test_drag_double_click_and_right_click(shell: Shell, site: SiteServer) -> None:
    start(shell, f"{site.url}/hands/board.html")
    # A card dragged by HTML5 drag and drop, from its centre to the Doing column.
    code, receipt = shell.json("drag", "250,180", "600,400")
    assert code == 0 and receipt["action"] == "drag_element" and receipt["target"] == 'div "Write report"', receipt
    assert receipt["changed"] > 0
    assert seen(site, "board") == [{"page": "board", "card": "write-report", "column": "doing", "types": "text/plain"}]

    code, receipt = shell.json("goto", f"{site.url}/hands/grid.html")
    assert code == 0, receipt
    # The quantity cell opens its editor only on a real double-click; the keys go into it.
    code, receipt = shell.json("double-click", "500,200")
    assert code == 0 and receipt["action"] == "double_click_element" and receipt["target"] == 'div "3"', receipt
    for key in ("7", "Enter"):
        code, receipt = shell.json("key", key)
        assert code == 0, receipt
    assert seen(site, "grid") == [{"page": "grid", "value": "7", "detail": "2"}]

    code, receipt = shell.json("goto", f"{site.url}/hands/files.html")
    # The page's own context menu opens on a right-click only; its Delete then deletes that row.
    code, receipt = shell.json("right-click", "300,150")
    assert code == 0 and receipt["action"] == "right_click_element" and receipt["changed"] > 0, receipt
    assert receipt["target"] == 'div "report.pdf"'
    code, receipt = shell.json("click", "580,230")
    assert code == 0, receipt
    assert seen(site, "files") == [{"page": "files", "deleted": "report.pdf"}]


def test_scroll_a_panel_by_its_ref_and_the_page(shell: Shell, site: SiteServer) -> None:
    start(shell, f"{site.url}/shell/scroll.html")
    panel = ref(shell, "Build log")
    code, receipt = shell.json("scroll", panel["ref"], "down")
    assert code == 0 and receipt["action"] == "scroll" and receipt["changed"] > 0, receipt
    moved = seen(site, "panel")
    assert moved and int(moved[-1]["top"]) > 0 and moved[-1]["window"] == "0", (receipt, site.hand_events)
    assert not seen(site, "page")  # the page itself did not scroll

    panel_top = moved[-1]["top"]
    code, receipt = shell.json("scroll", "down")
    assert code == 0 and receipt["changed"] > 0, receipt
    page = seen(site, "page")
    assert page and int(page[-1]["top"]) > 0 and page[-1]["panel"] == panel_top, page
    code, shot = shell.json("screenshot")
    assert shot["scroll"][1] == int(page[-1]["top"])


def test_a_bot_challenge_is_exit_5(shell: Shell, site: SiteServer) -> None:
    start(shell, f"{site.url}/shell/start.html")
    done = shell("session", "click", ref(shell, "Deals")["ref"])
    assert done.returncode == 5 and "bot challenge" in done.stdout, done
    assert seen(site, "challenge") == [{"page": "challenge", "loaded": "yes"}]
    code, receipt = shell.json("goto", f"{site.url}/shell/challenge.html")
    assert code == 5 and receipt["challenge"] is True and receipt["code"] == 5 and receipt["ok"] is False, receipt
    code, receipt = shell.json("goto", f"{site.url}/shell/start.html")
    assert code == 0 and receipt["challenge"] is False, receipt


def test_refs_reach_into_a_same_origin_frame_and_an_open_shadow_root(shell: Shell, site: SiteServer) -> None:
    start(shell, f"{site.url}/shell/frames.html")
    code, snap = shell.json("snap")
    names = [(c["role"], c["name"]) for c in snap["controls"]]
    assert names == [
        ("textbox", "Nickname"),
        ("button", "Save nickname"),
        ("textbox", "Coupon"),
        ("button", "Apply coupon"),
    ], snap
    text = shell("session", "text").stdout
    assert '[@e1 textbox "Nickname"]' in text and '[@e4 button "Apply coupon"]' in text, text

    code, typed = shell.json("type", "@e1", "ada")
    assert code == 0 and typed["value"] == "ada" and typed["target"] == 'textbox "Nickname"', typed
    code, clicked = shell.json("click", ref(shell, "Save nickname")["ref"])
    assert code == 0 and clicked["target"] == 'button "Save nickname"', clicked
    assert seen(site, "frame") == [{"page": "frame", "nick": "ada"}]

    code, typed = shell.json("type", ref(shell, "textbox Coupon")["ref"], "SPRING")
    assert code == 0 and typed["value"] == "SPRING", typed
    code, clicked = shell.json("click", ref(shell, "Apply coupon")["ref"])
    assert code == 0 and clicked["target"] == 'button "Apply coupon"', clicked
    assert seen(site, "shadow") == [{"page": "shadow", "coupon": "SPRING"}]


def test_refs_reach_into_a_cross_origin_frame(shell: Shell, site: SiteServer) -> None:
    start(shell, f"{site.url}/shell/farframe.html")  # inner.html from localhost: another origin, another process
    code, snap = shell.json("snap")
    names = [(c["role"], c["name"]) for c in snap["controls"]]
    assert code == 0 and names == [
        ("button", "Top button"),
        *[("textbox", "Nickname"), ("button", "Save nickname")] * 2,
        ("button", "Cover the page"),
    ]
    box = snap["controls"][1]  # in the frame's content box: x 140+6+30 = 176 on, y below the top button
    assert 176 < box["x"] < 176 + 520 and box["y"] > snap["controls"][0]["y"] + 60, snap
    text = shell("session", "text").stdout
    assert text.index("Top button") < text.index('[@e2 textbox "Nickname"]') < text.index("After the frame"), text

    before = len(seen(site, "frame"))  # the site is the module's: inner.html may have reported already
    code, typed = shell.json("type", "@e2", "lin")
    assert code == 0, typed
    code, clicked = shell.json("click", "@e3")
    assert code == 0 and clicked["changed"] > 0, clicked
    assert seen(site, "frame")[before:] == [{"page": "frame", "nick": "lin"}]  # the click landed on the button
    assert "Saved lin" in shell("session", "text").stdout

    # The second frame, below the fold: its refs scroll it into view, its page and itself.
    code, typed = shell.json("type", "@e4", "far")
    assert code == 0, typed
    code, clicked = shell.json("click", "@e5")
    assert code == 0 and clicked["changed"] > 0, clicked
    assert seen(site, "frame")[before:] == [{"page": "frame", "nick": "lin"}, {"page": "frame", "nick": "far"}]

    # Something of the page over the frame: a covered target, not a click on the overlay.
    assert shell("session", "click", "@e6").returncode == 0  # "Cover the page"
    assert shell("session", "snap").returncode == 0
    covered = shell("session", "click", "@e3")
    assert covered.returncode == 4 and "covered by" in covered.stderr, covered
    assert len(seen(site, "frame")[before:]) == 2
