"""Receipts are true: a click on nothing exits 3 and says so, a click that opens a tab reports it, a
stale or covered ref exits 4, and a secret's value is in no output, read or screenshot (its field
is masked, unlike the same text typed in the open). What a receipt reads at the action's point (the
control there, a field's value after typing or choosing, a checkbox's state after a click) reads
the same whether the form is the page itself, in a frame of its origin, or in a frame of another
origin (another renderer process: the page's scripts cannot enter it); the form reports each save
to the site, so the test sees where the action landed."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageChops

from webagent.testing.sites import SiteServer

from .conftest import Shell, seen
from .site import PASSWORD

pytestmark = pytest.mark.e2e


def signed_in(shell: Shell, shop_url: str) -> list[str]:
    outputs: list[str] = []
    for args in (
        ["start", "--url", f"{shop_url}/login", *shell.flags()],
        ["snap"],
        ["type", "@e1", "alice"],
        ["secret", "@e2", "PASSWORD"],
        ["click", "@e3"],
    ):
        done = shell("session", *args)
        assert done.returncode == 0, (args, done.stderr)
        outputs += [done.stdout, done.stderr]
    return outputs


def run(shell: Shell, *args: str) -> tuple[int, dict[str, Any]]:
    return shell.json(*args)


def test_nothing_changed_is_exit_3_and_a_new_tab_is_told(shell: Shell, shop_url: str) -> None:
    signed_in(shell, shop_url)
    code, nothing = run(shell, "click", "1200,700")
    assert code == 3 and nothing["unchanged"] is True and nothing["changed"] == 0, nothing
    plain = shell("session", "click", "1200,700")
    assert plain.returncode == 3 and "nothing changed" in plain.stdout
    code, found = run(shell, "find", "Help")
    code, opened = run(shell, "click", found["matches"][0]["ref"])
    assert code == 0 and opened["tab_opened"] is True and opened["tabs"] == 2, opened
    code, tabs = run(shell, "tab", "list")
    assert [t["title"] for t in tabs["tabs"]] == ["Items", "Help"]
    code, back = run(shell, "tab", "0")
    assert code == 0 and back["title"] == "Items"


def test_a_ref_gone_from_the_page_is_stale(shell: Shell, shop_url: str) -> None:
    signed_in(shell, shop_url)
    shell("session", "snap")
    shell("session", "hover", "@e1")  # the menu opens: its link gets a ref
    _, found = run(shell, "find", "Export CSV")
    link = found["matches"][0]["ref"]
    shell("session", "hover", "1200,700")  # the menu closes
    stale = shell("session", "click", link)
    assert stale.returncode == 4 and "stale ref" in stale.stderr, stale


def _crop(png: bytes, x: float, y: float) -> Image.Image:
    return Image.open(io.BytesIO(png)).convert("RGB").crop((int(x) - 80, int(y) - 10, int(x) + 80, int(y) + 10))


def test_a_secret_is_in_no_output_read_or_screenshot(shell: Shell, shop_url: str, tmp_path: Path) -> None:
    outputs = signed_in(shell, shop_url)
    _, found = run(shell, "find", "New item")
    field = found["matches"][0]
    outputs.append(json.dumps(found))
    # The value typed in the open first, for comparison: the secret's field must not look like it.
    typed = shell("session", "--json", "type", field["ref"], PASSWORD)
    assert json.loads(typed.stdout)["value"] == "{{PASSWORD}}"  # redacted even where typed in the open
    outputs += [typed.stdout, typed.stderr]
    open_shot = tmp_path / "open.png"
    shell("session", "screenshot", "--path", str(open_shot))
    done = shell("session", "--json", "secret", field["ref"], "PASSWORD")  # into a plain text field
    outputs += [done.stdout, done.stderr]
    assert done.returncode == 0, done.stderr
    for args in (["text"], ["snap"], ["--json", "text"], ["--json", "snap"], ["list"], ["downloads"]):
        read = shell("session", *args)
        outputs += [read.stdout, read.stderr]
    shot = tmp_path / "masked.png"
    shell("session", "screenshot", "--path", str(shot))
    masked, shown = (
        _crop(shot.read_bytes(), field["x"], field["y"]),
        _crop(open_shot.read_bytes(), field["x"], field["y"]),
    )
    assert ImageChops.difference(masked, shown).getbbox() is not None
    assert all(PASSWORD not in out for out in outputs)
    log = (shell.directory / "daemon.log").read_text()
    assert PASSWORD not in log


PLACES = {"top": "account.html", "same": "accountframe.html?same", "far": "accountframe.html"}


def refs(shell: Shell) -> dict[str, str]:
    code, snap = shell.json("snap")
    assert code == 0, snap
    return {c["name"]: c["ref"] for c in snap["controls"]}


@pytest.mark.parametrize("place", list(PLACES))
def test_receipts_in_a_frame_name_the_control_and_its_value(shell: Shell, site: SiteServer, place: str) -> None:
    hosts = ["--secret-host", "PASSWORD=127.0.0.1", "--secret-host", "PASSWORD=localhost"]  # the frame's too
    done = shell("session", "start", "--url", f"{site.url}/shell/{PLACES[place]}", *shell.flags(), *hosts)
    assert done.returncode == 0, done.stderr
    ref = refs(shell)
    assert {"Nickname", "Pin", "Fruit", "Newsletter", "Save"} <= set(ref), ref
    outputs = []

    code, typed = shell.json("type", ref["Nickname"], "lin")
    assert code == 0 and typed["target"] == 'textbox "Nickname"' and typed["value"] == "lin", typed
    plain = shell("session", "type", "--clear", ref["Nickname"], "ada")
    assert plain.returncode == 0 and 'on textbox "Nickname"' in plain.stdout and "value 'ada'" in plain.stdout

    # A secret into a plain field: its value is told redacted, in the frame as on the page.
    secret = shell("session", "--json", "secret", ref["Nickname"], "PASSWORD")
    outputs += [secret.stdout, secret.stderr]
    assert secret.returncode == 0, secret.stderr
    assert '"target": "textbox \\"Nickname\\""' in secret.stdout and '"value": "{{PASSWORD}}"' in secret.stdout
    secret = shell("session", "secret", ref["Pin"], "PASSWORD")  # a password field's value: dots
    outputs += [secret.stdout, secret.stderr]
    assert secret.returncode == 0 and 'on password "Pin"' in secret.stdout and "value '••••" in secret.stdout

    code, chosen = shell.json("select", ref["Fruit"], "Pear")
    assert code == 0 and chosen["target"] == 'combobox "Fruit"' and chosen["value"] == "Pear", chosen
    code, ticked = shell.json("click", ref["Newsletter"])
    assert code == 0 and ticked["target"] == 'checkbox "Newsletter"' and ticked["value"] == "checked", ticked

    before = len(seen(site, "account"))
    code, clicked = shell.json("click", ref["Save"])
    assert code == 0 and clicked["target"] == 'button "Save"' and clicked["changed"] > 0, clicked
    saved = seen(site, "account")[before:]
    assert [(e["where"], e["news"], e["nick"] == PASSWORD) for e in saved] == [
        ("top" if place == "top" else "frame", "true", True)
    ]
    # By its point as well as by its ref.
    code, found = shell.json("find", "Save")
    assert code == 0, found
    point = f"{found['matches'][0]['x']:.0f},{found['matches'][0]['y']:.0f}"
    clicked_at = shell("session", "click", point)
    outputs += [clicked_at.stdout, clicked_at.stderr]
    assert clicked_at.returncode == 0 and clicked_at.stdout.startswith('click_element; on button "Save"; at'), (
        clicked_at
    )
    assert len(seen(site, "account")[before:]) == 2
    for args in (["text"], ["--json", "snap"]):  # the frame's reads of the secret's field too
        read = shell("session", *args)
        outputs += [read.stdout, read.stderr]
        assert read.returncode == 0 and "{{PASSWORD}}" in read.stdout, read
    assert all(PASSWORD not in out for out in outputs)
